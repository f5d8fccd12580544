"""Train with Ray Train on two tpu chips of one host, DDP over tpu_dist.

An ordinary Ray Train job: the training function asks Ray for its device
(``ray.train.torch.get_device()``), lets ``prepare_model`` wrap the model
in DDP and ``prepare_data_loader`` shard the data, and never names tpu.
What makes it run on tpu is the scaling config and the cluster:

* ``ScalingConfig(num_workers=2, use_tpu=True)``: each worker holds one of
  Ray's ``TPU`` resources, so Ray gives it ``TPU_VISIBLE_CHIPS`` (its own
  chip, ``tpu:0`` in that process), its TPU device manager and the
  ``tpu_dist`` process group;
* the host's chips declared to Ray, which detects only physical TPU
  devices: ``ray.init(resources={"TPU": 2})`` here, or
  ``ray start --head --resources='{"TPU": 2}'`` for a standing cluster.

    python examples/ray_train.py            # 2 workers, 4 epochs
    python examples/ray_train.py --check    # and compare with one CPU process

``--check`` trains the same model on the CPU in one process over the whole
batch (what DDP's averaged gradients compute) and exits non-zero when the
weights differ by more than float32 rounding allows.
"""
import argparse
import json
import os
import sys
import tempfile

import torch

import ray
import ray.train
import ray.train.torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

WORKERS = 2


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    return torch.utils.data.TensorDataset(x, torch.sin(x[:, :4]) + 0.1 * x[:, 4:8])


def train_epochs(model, loader, epochs, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for epoch in range(epochs):
        if hasattr(loader, "sampler") and hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def train_func(config):
    """One Ray Train worker: plain PyTorch, device chosen by Ray."""
    import torch.distributed as dist

    import torch_tpu

    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(make_model())
    loader = ray.train.torch.prepare_data_loader(
        torch.utils.data.DataLoader(make_data(), batch_size=config["batch"] // WORKERS))
    losses = train_epochs(model, loader, config["epochs"], config["lr"])
    rank = ray.train.get_context().get_world_rank()
    report = {"rank": rank, "device": str(next(model.parameters()).device),
              "backend": dist.get_backend(), "chip": os.environ.get("TPU_VISIBLE_CHIPS"),
              "losses": losses, "fallbacks": sum(torch_tpu.fallback_counts().values())}
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    if rank == 0:
        torch.save({k: v.cpu() for k, v in model.module.state_dict().items()},
                   os.path.join(config["out"], "weights.pt"))
    ray.train.report({"loss": losses[-1]})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="global batch (both workers)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--check", action="store_true", help="compare with one CPU process")
    a = p.parse_args()
    out = tempfile.mkdtemp(prefix="ray-train-")
    ray.init(num_cpus=WORKERS, resources={"TPU": WORKERS}, include_dashboard=False,
             log_to_driver=os.environ.get("RAYLOG") == "1")
    try:
        trainer = TorchTrainer(
            train_func,
            train_loop_config={"epochs": a.epochs, "batch": a.batch, "lr": a.lr, "out": out},
            scaling_config=ScalingConfig(num_workers=WORKERS, use_tpu=True),
            run_config=RunConfig(storage_path=out, name="tpu"))
        trainer.fit()
    finally:
        ray.shutdown()
    reports = []
    for r in range(WORKERS):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            reports.append(json.load(f))
    for r in reports:
        print(f"worker {r['rank']}: {r['device']} (chip {r['chip']}), {r['backend']}, "
              f"{len(r['losses'])} steps, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, "
              f"CPU fallbacks: {r['fallbacks']}")
    if not a.check:
        return 0
    # The same training in one CPU process over the whole batch: DDP averages
    # the workers' gradients, and their shards (DistributedSampler, in order)
    # together are the CPU's batch.
    model = make_model()
    cpu_losses = train_epochs(model, torch.utils.data.DataLoader(make_data(), batch_size=a.batch),
                              a.epochs, a.lr)
    tpu = torch.load(os.path.join(out, "weights.pt"))
    worst = max((tpu[k] - v).abs().max().item() for k, v in model.state_dict().items())
    mean_loss = [sum(r["losses"][i] for r in reports) / WORKERS for i in range(len(cpu_losses))]
    loss_diff = max(abs(x - y) for x, y in zip(mean_loss, cpu_losses))
    print(f"cpu, one process: loss {cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f}; largest weight "
          f"difference {worst:.2e}, largest loss difference {loss_diff:.2e}")
    ok = (worst < 1e-4 and loss_diff < 1e-4 and len(cpu_losses) == len(mean_loss)
          and all(r["device"].startswith("tpu") and r["backend"] == "tpu_dist" for r in reports)
          and len({r["chip"] for r in reports}) == WORKERS)
    if not ok:
        print("FAIL: the workers did not train on distinct tpu chips with tpu_dist, "
              "or the result differs from the CPU's")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
