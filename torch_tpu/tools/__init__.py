"""Command-line tools of torch_tpu (``python -m torch_tpu.tools.<name>``)."""
