"""One process of a tests/test_integrations.py scenario, run under torchrun
(several ranks) or alone (the single-process reference).

    python integrations_worker.py SCENARIO RESULT_FILE BATCH

Each scenario is the ordinary code a user would write for CUDA with the
device string changed (or not even that: accelerate and the Trainer pick
tpu themselves). Rank 0 writes {"losses": [...], ...} as JSON to
RESULT_FILE. BATCH is the global batch size; under torchrun each rank takes
BATCH / WORLD_SIZE of it, so the losses must equal the single-process run.
"""
import json
import os
import sys

import torch

import torch_tpu  # noqa: F401

STEPS = 5


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=96, n_positions=32,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    """A fixed token dataset: every run sees the same examples."""

    def __init__(self, n=64, length=16):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 96, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer(out, batch):
    from transformers import Trainer, TrainingArguments

    world = int(os.environ.get("WORLD_SIZE", 1))
    args = TrainingArguments(output_dir=os.path.dirname(out), max_steps=STEPS, logging_steps=1,
                             per_device_train_batch_size=batch // world, learning_rate=1e-3,
                             seed=0, report_to=[], save_strategy="no", disable_tqdm=True,
                             dataloader_num_workers=0, use_cpu=os.environ.get("WORKER_USE_CPU") == "1")
    model = tiny_gpt2()
    t = Trainer(model=model, args=args, train_dataset=Tokens())
    t.train()
    losses = [h["loss"] for h in t.state.log_history if "loss" in h]
    param = next(t.model.parameters())
    return {"losses": losses, "device": str(param.device), "args_device": str(args.device),
            "distributed_type": str(t.accelerator.distributed_type),
            "ddp": type(t.model_wrapped).__name__, "world": world,
            "backend": str(torch.distributed.get_backend()) if torch.distributed.is_initialized() else None}


def accelerator(out, batch):
    from accelerate import Accelerator

    acc = Accelerator()
    world = acc.num_processes
    model = tiny_gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=batch // world, shuffle=False)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses = []
    for step, example in enumerate(loader):
        if step == STEPS:
            break
        loss = model(**example).loss
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), reduction="mean").item())
    return {"losses": losses, "device": str(acc.device), "world": world,
            "distributed_type": str(acc.distributed_type), "ddp": type(model).__name__,
            "param_device": str(next(model.parameters()).device)}


def ddp_tutorial(out, batch):
    """PyTorch's DDP tutorial with "cuda" replaced by "tpu"."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.tpu.set_device(local_rank)
    dist.init_process_group("tpu_dist")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5))
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(batch, 10, generator=g), torch.randn(batch, 5, generator=g)
    share = batch // world
    xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs.to(local_rank)), ys.to(local_rank))
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    devices = [None] * world
    dist.all_gather_object(devices, str(next(model.parameters()).device))
    dist.destroy_process_group()
    return {"losses": losses, "devices": devices, "world": world}


def ddp_tutorial_single(out, batch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(batch, 10, generator=g), torch.randn(batch, 5, generator=g)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "devices": [str(next(model.parameters()).device)], "world": 1}


SCENARIOS = {f.__name__: f for f in (trainer, accelerator, ddp_tutorial, ddp_tutorial_single)}

if __name__ == "__main__":
    scenario, out, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = SCENARIOS[scenario](out, batch)
    if int(os.environ.get("RANK", 0)) == 0:
        result["chips"] = torch.tpu.device_count()
        with open(out, "w") as f:
            json.dump(result, f)
