"""torch_tpu.integrations: accelerate (and the HF Trainer) and safetensors
see tpu with their users' ordinary code, and the results equal CPU's.

Single-process checks run in a child interpreter (accelerate keeps global
state); the distributed ones run tests/integrations_worker.py under
torchrun with two ranks and compare with one process over the whole batch.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import check_result, child_env, run_checks, run_python

pytest.importorskip("accelerate")
pytest.importorskip("safetensors")
pytest.importorskip("transformers")

WORKER = os.path.join(os.path.dirname(__file__), "integrations_worker.py")


def test_integrations_apply_on_import_and_report_status():
    r = run_python("""
        import torch_tpu, json
        from torch_tpu import integrations
        before = integrations.status()
        import accelerate, safetensors.torch
        print(json.dumps([before, integrations.status()]))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    before, after = json.loads(r.stdout.splitlines()[-1])
    # torch's own part (torch.distributed.rendezvous) applies with torch_tpu
    assert set(before) == {"torch"} and before["torch"].startswith("applied 2.14"), before
    assert after["accelerate"].startswith("applied 1.15"), after
    assert after["safetensors"].startswith("applied"), after


def test_library_imported_before_torch_tpu_is_patched_too():
    r = run_python("""
        import accelerate, torch, json
        import torch_tpu
        from accelerate import PartialState
        print(json.dumps([torch_tpu.integrations.status()["accelerate"], str(PartialState().device)]))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    state, device = json.loads(r.stdout.splitlines()[-1])
    assert state.startswith("applied") and device == "tpu:0"


def test_unsupported_version_is_left_alone_with_a_warning(tmp_path):
    fake = tmp_path / "accelerate"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '0.9.0'\nfrom . import state\n")
    (fake / "state.py").write_text("class PartialState:\n    pass\n")
    r = run_python("""
        import warnings, json
        warnings.simplefilter("always")
        import torch_tpu
        with warnings.catch_warnings(record=True) as caught:
            import accelerate
        untouched = "_prepare_backend" not in vars(accelerate.state.PartialState)
        print(json.dumps([torch_tpu.integrations.status()["accelerate"], [str(w.message) for w in caught],
                          untouched]))
    """, PYTHONPATH=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    state, warned, untouched = json.loads(r.stdout.splitlines()[-1])
    assert untouched
    assert state.startswith("skipped: accelerate 0.9.0 is outside"), state
    assert any("outside the range" in w for w in warned), warned


def test_integrations_can_be_turned_off():
    r = run_python("""
        import torch_tpu, accelerate, json
        from accelerate import PartialState
        print(json.dumps([torch_tpu.integrations.status(), str(PartialState().device)]))
    """, TORCH_TPU_INTEGRATIONS="0")
    assert r.returncode == 0, r.stderr[-3000:]
    state, device = json.loads(r.stdout.splitlines()[-1])
    assert state == {} and device == "cpu"


def test_torch_compile_patches_are_inert_outside_the_tpu_backend(tmp_path):
    """integrations/torch_compile.py: AOTAutograd's cache directory and key
    are ours only while the tpu backend compiles; Inductor's otherwise."""
    r = run_python("""
        import json, os, torch, torch_tpu
        from torch_tpu import integrations, _compile_cache as cc
        from torch._functorch._aot_autograd import autograd_cache as ac
        ok = integrations.apply("torch._functorch._aot_autograd.autograd_cache")
        outside = ac.AOTAutogradCache._get_tmp_dir()
        with cc.enabled(torch_tpu.dynamo._default):
            inside = ac.AOTAutogradCache._get_tmp_dir()
        print(json.dumps([ok, getattr(ac.AOTAutogradCache._get_tmp_dir, "_torch_tpu", False),
                          outside, inside, integrations.status()["torch"]]))
    """, TORCH_TPU_CACHE_DIR=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    ok, marked, outside, inside, state = json.loads(r.stdout.splitlines()[-1])
    assert ok and marked and state.startswith("applied 2.14"), (ok, marked, state)
    assert inside == os.path.join(str(tmp_path), "aotautograd"), inside
    assert not outside.startswith(str(tmp_path)), outside
    # with the integrations off nothing is patched, so the disk cache (whose
    # key needs torch_tpu's part) is off too
    r = run_python("""
        import json, torch_tpu
        print(json.dumps(torch_tpu.dynamo._default.cache_enabled()))
    """, TORCH_TPU_INTEGRATIONS="0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) is False


def test_flex_attention_device_check_patch():
    """torch 2.14 refuses tpu in flex_attention's device check; the patch
    admits it (tests/test_complex_ops.py checks the numbers), and with the
    integrations off torch's own ValueError is back."""
    code = """
        import torch, torch_tpu, json
        from torch.nn.attention.flex_attention import flex_attention
        q = torch.randn(1, 2, 8, 4, device="tpu")
        try:
            flex_attention(q, q, q)
            got = "ran"
        except ValueError as exc:
            got = str(exc)
        print(json.dumps([torch_tpu.integrations.status().get("torch"), got]))
    """
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    state, got = json.loads(r.stdout.splitlines()[-1])
    assert state.startswith("applied 2.14") and got == "ran", (state, got)
    r = run_python(code, TORCH_TPU_INTEGRATIONS="0")
    assert r.returncode == 0, r.stderr[-3000:]
    state, got = json.loads(r.stdout.splitlines()[-1])
    assert state is None and "only supported on" in got, (state, got)


def test_ray_train_scaling_config_patch():
    """Ray Train V2 refuses ``use_tpu=True`` with two workers unless a
    multi-host slice (topology, accelerator_type) is named; the patch admits
    the single-host form and keeps Ray's other checks and its slice path.
    examples/ray_train.py (tests/test_examples.py) trains with it."""
    code = """
        import torch, torch_tpu, json
        from ray.train import ScalingConfig
        import ray.train.torch  # noqa: F401
        def outcome(**kwargs):
            try:
                ScalingConfig(**kwargs)
                return "ok"
            except ValueError as exc:
                return str(exc)
        print(json.dumps([torch_tpu.integrations.status().get("ray"),
                          outcome(num_workers=2, use_tpu=True),
                          outcome(num_workers=2, use_tpu=True, accelerator_type="TPU-V6E"),
                          outcome(num_workers=2, use_tpu=True, use_gpu=True),
                          outcome(num_workers=2, use_tpu=True, resources_per_worker={"TPU": 0})]))
    """
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-3000:]
    state, plain, sliced, gpu, zero = json.loads(r.stdout.splitlines()[-1])
    assert state.startswith("applied 2.60") and plain == "ok", (state, plain)
    assert "`topology` must be specified" in sliced, sliced
    assert "use_gpu=True` and `use_tpu=True" in gpu, gpu
    assert "positive number of `TPU`" in zero, zero
    r = run_python(code, TORCH_TPU_INTEGRATIONS="0")
    assert r.returncode == 0, r.stderr[-3000:]
    state, plain = json.loads(r.stdout.splitlines()[-1])[:2]
    assert state is None and "`topology` must be specified" in plain, (state, plain)


def test_safetensors_loads_onto_tpu():
    results = run_checks("""
        import os, tempfile
        from safetensors.torch import load_file, save_file
        from safetensors import safe_open

        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, "w.safetensors")
        g = torch.Generator().manual_seed(0)
        tensors = {"f32": torch.randn(3, 5, generator=g), "bf16": torch.randn(4, generator=g).bfloat16(),
                   "f16": torch.randn(2, 2, generator=g).half(), "i64": torch.arange(7),
                   "u8": torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8)}
        save_file(tensors, path)

        @check
        def load_file_every_tpu_spelling():
            for device, index in [("tpu", 0), ("tpu:1", 1), (torch.device("tpu", 1), 1), (torch.device("tpu"), 0)]:
                loaded = load_file(path, device=device)
                assert sorted(loaded) == sorted(tensors)
                for k, v in loaded.items():
                    assert v.device == torch.device("tpu", index), (device, v.device)
                    assert v.dtype == tensors[k].dtype
                    assert torch.equal(v.cpu(), tensors[k])

        @check
        def bare_tpu_means_the_current_chip():
            torch.tpu.set_device(1)
            try:
                assert load_file(path, device="tpu")["f32"].device == torch.device("tpu", 1)
            finally:
                torch.tpu.set_device(0)

        @check
        def safe_open_tensors_and_slices():
            with safe_open(path, framework="pt", device="tpu:1") as f:
                t = f.get_tensor("f32")
                assert t.device == torch.device("tpu", 1) and torch.equal(t.cpu(), tensors["f32"])
                part = f.get_slice("f32")[1:3]
                assert part.device == torch.device("tpu", 1) and torch.equal(part.cpu(), tensors["f32"][1:3])

        @check
        def cpu_and_bad_devices_unchanged():
            assert load_file(path, device="cpu")["i64"].device.type == "cpu"
            try:
                load_file(path, device="tpu:5")
            except Exception as e:  # an invalid ordinal, not a silent load elsewhere
                assert "tpu" in str(e) or "device" in str(e).lower(), e
            else:
                raise AssertionError("tpu:5 of 2 chips loaded")
    """, TORCH_TPU_NUM_CHIPS="2")
    for name in ["load_file_every_tpu_spelling", "bare_tpu_means_the_current_chip",
                 "safe_open_tensors_and_slices", "cpu_and_bad_devices_unchanged"]:
        check_result(results, name)


def test_accelerator_trains_on_tpu_like_cpu():
    results = run_checks("""
        from accelerate import Accelerator, PartialState
        from accelerate.state import AcceleratorState

        def train(cpu, mixed_precision="no"):
            AcceleratorState._reset_state(True)
            acc = Accelerator(cpu=cpu, mixed_precision=mixed_precision)
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            g = torch.Generator().manual_seed(1)
            data = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g))
            loader = torch.utils.data.DataLoader(data, batch_size=8)
            model, opt, loader = acc.prepare(model, opt, loader)
            losses, seen = [], set()
            for x, y in loader:
                seen.add(str(x.device))
                out = model(x)
                loss = torch.nn.functional.mse_loss(out.float(), y)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            return acc, model, losses, seen

        @check
        def chooses_tpu_and_matches_cpu():
            assert str(PartialState().device) == "tpu:0"
            acc, model, losses, seen = train(cpu=False)
            assert str(acc.device) == "tpu:0" and seen == {"tpu:0"}, (acc.device, seen)
            assert next(model.parameters()).device.type == "tpu"
            _, _, cpu_losses, cpu_seen = train(cpu=True)
            assert cpu_seen == {"cpu"}
            assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)

        @check
        def bf16_mixed_precision_autocasts_on_tpu():
            acc, model, losses, _ = train(cpu=False, mixed_precision="bf16")
            inner = []
            first = model[0] if isinstance(model, torch.nn.Sequential) else model.module[0]
            first.register_forward_hook(lambda m, i, o: inner.append(o.dtype))
            model(torch.randn(2, 8, device=acc.device))
            assert inner == [torch.bfloat16], inner
            _, _, cpu_losses, _ = train(cpu=True, mixed_precision="bf16")
            assert_close(losses, cpu_losses, rtol=2e-2, atol=2e-2)

        @check
        def fp16_mixed_precision_scales_on_tpu():
            # accelerate refuses fp16 outside its device tuple and would build
            # a CUDA GradScaler; on tpu: float16 autocast, GradScaler("tpu"),
            # its ops native, losses those of the same loop on the CPU.
            torch_tpu.reset_counts()
            acc, model, losses, _ = train(cpu=False, mixed_precision="fp16")
            assert isinstance(acc.scaler, torch.amp.GradScaler) and acc.scaler._device == "tpu"
            assert torch_tpu.fallback_counts() == {}, torch_tpu.fallback_counts()
            torch.manual_seed(0)
            ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
            opt, scaler = torch.optim.AdamW(ref.parameters(), lr=1e-2), torch.amp.GradScaler("cpu")
            g = torch.Generator().manual_seed(1)
            xs, ys = torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)
            cpu_losses = []
            for k in range(0, 32, 8):
                with torch.autocast("cpu", dtype=torch.float16):
                    out = ref(xs[k:k + 8])
                loss = torch.nn.functional.mse_loss(out.float(), ys[k:k + 8])
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
                cpu_losses.append(loss.item())
            assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
    """)
    check_result(results, "chooses_tpu_and_matches_cpu")
    check_result(results, "bf16_mixed_precision_autocasts_on_tpu")
    check_result(results, "fp16_mixed_precision_scales_on_tpu")


def test_device_map_auto_sees_tpu_chips(tmp_path):
    results = run_checks(f"""
        from accelerate import infer_auto_device_map
        from accelerate.utils import get_max_memory
        from transformers import GPT2Config, GPT2LMHeadModel

        tmp = {str(tmp_path)!r}

        @check
        def max_memory_counts_chips_and_accepts_tpu_keys():
            budget = get_max_memory()
            assert list(budget) == [0, 1, "cpu"], budget
            for i in (0, 1):
                assert budget[i] == torch.tpu.mem_get_info(i)[0] > 0
            assert get_max_memory({{"tpu:1": "1GB", "tpu:0": 1000, "cpu": "2GB"}}) == \\
                {{0: 1000, 1: 10**9, "cpu": 2 * 10**9}}
            assert get_max_memory({{torch.device("tpu", 0): 5}}) == {{0: 5}}
            for bad, kind in [({{"tpu:7": 1}}, "not available"), ({{"gpu": 1}}, "not recognized")]:
                try:
                    get_max_memory(bad)
                except ValueError as e:
                    assert kind in str(e), e
                else:
                    raise AssertionError(bad)

        @check
        def infer_and_from_pretrained_place_on_tpu():
            torch.manual_seed(0)
            config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=96, n_positions=32)
            GPT2LMHeadModel(config).save_pretrained(tmp)
            ref = GPT2LMHeadModel.from_pretrained(tmp).eval()
            dmap = infer_auto_device_map(ref, max_memory={{"tpu:0": "1GB", "cpu": "1GB"}})
            assert set(dmap.values()) == {{0}}, dmap
            model = GPT2LMHeadModel.from_pretrained(tmp, device_map="auto").eval()
            assert {{p.device for p in model.parameters()}} == {{torch.device("tpu", 0)}}
            # a budget too small for chip 0 spreads the layers over both chips
            spread = infer_auto_device_map(ref, max_memory={{"tpu:0": 90_000, "tpu:1": 10**9}},
                                           no_split_module_classes=ref._no_split_modules)
            assert set(spread.values()) == {{0, 1}}, spread
            split = GPT2LMHeadModel.from_pretrained(tmp, device_map=spread).eval()
            assert {{p.device.index for p in split.parameters()}} == {{0, 1}}
            # "auto" with "tpu:N" budgets: on tpu chips (transformers balances them its own way)
            auto = GPT2LMHeadModel.from_pretrained(tmp, device_map="auto",
                                                   max_memory={{"tpu:0": 90_000, "tpu:1": 10**9}})
            assert {{p.device.type for p in auto.parameters()}} == {{"tpu"}}
            ids = torch.randint(0, 96, (2, 12))
            want = ref(ids).logits
            assert_close(model(ids.to("tpu")).logits.cpu(), want, rtol=1e-4, atol=1e-4)
            assert_close(split(ids.to("tpu")).logits.cpu(), want, rtol=1e-4, atol=1e-4)
    """, TORCH_TPU_NUM_CHIPS="2")
    check_result(results, "max_memory_counts_chips_and_accepts_tpu_keys")
    check_result(results, "infer_and_from_pretrained_place_on_tpu")


def _run_worker(tmp_path, scenario, batch, nproc=None, timeout=420, **env):
    out = tmp_path / f"{scenario}-{nproc or 1}.json"
    if nproc:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               "--master_addr=127.0.0.1", f"--master_port={port}", WORKER, scenario, str(out), str(batch)]
    else:
        cmd = [sys.executable, WORKER, scenario, str(out), str(batch)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=child_env(**{"TORCH_TPU_NUM_CHIPS": None, "TPU_VISIBLE_CHIPS": None, **env}), cwd=str(tmp_path))
    assert p.returncode == 0 and out.exists(), f"rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads(out.read_text())


def test_trainer_single_process_matches_cpu(tmp_path):
    tpu = _run_worker(tmp_path, "trainer", 4)
    cpu = _run_worker(tmp_path, "trainer", 4, WORKER_USE_CPU="1")
    assert tpu["device"] == "tpu:0" and tpu["args_device"] == "tpu:0", tpu
    assert cpu["device"] == "cpu", cpu
    assert len(tpu["losses"]) == 5
    assert tpu["losses"] == pytest.approx(cpu["losses"], rel=1e-5, abs=1e-6)


def test_trainer_under_torchrun_uses_tpu_dist_and_matches_one_process(tmp_path):
    two = _run_worker(tmp_path, "trainer", 4, nproc=2)
    one = _run_worker(tmp_path, "trainer", 4)
    assert two["world"] == 2 and two["chips"] == 2, two
    assert two["device"] == "tpu:0" and two["ddp"] == "DistributedDataParallel", two
    assert "tpu_dist" in two["backend"], two
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5, abs=1e-6)


def test_accelerator_under_torchrun_matches_one_process(tmp_path):
    two = _run_worker(tmp_path, "accelerator", 4, nproc=2)
    one = _run_worker(tmp_path, "accelerator", 4)
    assert two["world"] == 2 and two["ddp"] == "DistributedDataParallel", two
    assert two["device"] == "tpu:0" and two["param_device"] == "tpu:0", two
    assert one["device"] == "tpu:0" and one["world"] == 1, one
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5, abs=1e-6)


def test_cuda_style_ddp_tutorial_under_torchrun(tmp_path):
    two = _run_worker(tmp_path, "ddp_tutorial", 8, nproc=2)
    one = _run_worker(tmp_path, "ddp_tutorial_single", 8)
    assert two["devices"] == ["tpu:0", "tpu:1"], two
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5, abs=1e-6)


def test_visible_chips_still_restrict_under_torchrun():
    code = "import torch, torch_tpu; print(torch.tpu.device_count())"
    counts = {}
    unset = dict(TORCH_TPU_NUM_CHIPS=None, TPU_VISIBLE_CHIPS=None)
    for name, env in {"torchrun": dict(LOCAL_WORLD_SIZE="4"),
                      "visible": dict(LOCAL_WORLD_SIZE="4", TPU_VISIBLE_CHIPS="2"),
                      "explicit": dict(LOCAL_WORLD_SIZE="4", TORCH_TPU_NUM_CHIPS="3"),
                      "alone": dict(LOCAL_WORLD_SIZE="1")}.items():
        r = run_python(code, **{**unset, **env})
        assert r.returncode == 0, r.stderr[-2000:]
        counts[name] = int(r.stdout.split()[-1])
    assert counts == {"torchrun": 4, "visible": 1, "explicit": 3, "alone": 1}, counts


def test_torchrun_master_port_zero_fails_fast_and_rdzv_port_zero_works(tmp_path):
    """``torchrun --master_port=0`` hands workers MASTER_PORT=0 while its store
    listens elsewhere (pytorch/pytorch#130656; Gloo on the CPU hangs the same
    way): instead of waiting minutes for the store, init_process_group raises a
    ValueError naming the launch that works, ``--rdzv-backend=c10d
    --rdzv-endpoint=HOST:0``, which then runs tpu_dist on a free port."""
    script = tmp_path / "allreduce.py"
    script.write_text(
        "import torch, torch.distributed as dist, torch_tpu\n"
        "dist.init_process_group('tpu_dist')\n"
        "t = torch.ones(3, device='tpu') * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        # one write per rank: print's separate writes interleave between ranks
        "import sys; sys.stdout.write(f'sum {t.cpu().tolist()}\\n'); sys.stdout.flush()\n"
        "dist.destroy_process_group()\n")
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    bad = subprocess.run(launch + ["--master_addr=127.0.0.1", "--master_port=0", str(script)],
                         env=child_env(), capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "MASTER_PORT=0 under torchrun" in bad.stderr + bad.stdout, bad.stderr[-2000:]
    good = subprocess.run(launch + ["--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", str(script)],
                          env=child_env(), capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stderr[-2000:]
    assert good.stdout.count("sum [3.0, 3.0, 3.0]") == 2, good.stdout
