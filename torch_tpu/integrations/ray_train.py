"""Ray Train: a several-worker ``TorchTrainer`` on the chips of one host.

Ray Train already knows torch_tpu: a worker holding Ray's ``TPU`` resource
gets ``TPU_VISIBLE_CHIPS`` (its own chip, which torch_tpu shows as
``tpu:0``), Ray's TPU device manager (``ray.train.torch.get_device()`` is
``tpu``, ``prepare_model`` wraps in DDP on it) and the ``tpu_dist`` process
group. What stops two workers on one host is one check:

* ``ScalingConfig._validate_tpu_config`` (Ray Train V2, the default): with
  ``use_tpu=True`` and more than one worker it demands ``topology`` and
  ``accelerator_type``, which name a multi-host TPU slice to reserve
  through node labels that only TPU VMs carry. Without both, the patch
  keeps the other checks and lets the workers be placed by the ordinary
  placement group of ``{"TPU": 1}`` bundles, as for GPUs. Giving either
  still takes Ray's slice path unchanged.

The host's chips are declared as Ray resources, since Ray detects only
physical TPU devices (``/dev/accel*``): ``ray.init(resources={"TPU": 2})``
or ``ray start --head --resources='{"TPU": 2}'``. See docs/distributed.md, "Ray Train".

Retire when Ray Train accepts ``use_tpu=True`` with several workers and no
topology (single-host placement, as ``use_gpu``); the proposed upstream
change is in ``docs/upstream/ray-train-tpu.patch``.
"""
import functools

SUPPORTED = ("2.60", "2.61")


def patch_config(module) -> None:
    """``ray.train.v2.api.config``: several tpu workers without a slice."""
    cls = module.ScalingConfig
    original = cls._validate_tpu_config
    if getattr(original, "_torch_tpu_original", None) is not None:
        return

    @functools.wraps(original)
    def _validate_tpu_config(self):
        if not (self.use_tpu and self.max_workers > 1
                and not self.topology and not self.accelerator_type):
            return original(self)
        # Ray's own checks that do not concern slices, in its words.
        if self.use_gpu:
            raise ValueError("Cannot specify both `use_gpu=True` and `use_tpu=True`.")
        if self.num_tpus_per_worker == 0:
            raise ValueError(
                "`use_tpu` is True but `TPU` is set to 0 in `resources_per_worker`. Either set "
                "`use_tpu` to False or request a positive number of `TPU` in "
                "`resources_per_worker.")

    _validate_tpu_config._torch_tpu_original = original
    cls._validate_tpu_config = _validate_tpu_config
