"""scripts/check_layers.py, which the build runs after every runtime build,
fails when a lower layer calls into a higher one and passes otherwise.

Two object files are compiled here: `low.o` calls a function that `high.o`
defines. Given as layers low < high that is a call upward (rejected); given
as high < low it is a call downward (accepted)."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "check_layers.py")

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None,
                                reason="needs a C compiler and binutils' nm")


def _objects(tmp_path):
    (tmp_path / "low.c").write_text("int high_fn(void);\nint low_fn(void) { return high_fn() + 1; }\n")
    (tmp_path / "high.c").write_text("int high_fn(void) { return 41; }\n")
    objs = {}
    for name in ("low", "high"):
        obj = tmp_path / f"{name}.o"
        subprocess.run(["cc", "-c", str(tmp_path / f"{name}.c"), "-o", str(obj)], check=True)
        objs[name] = str(obj)
    return objs


def _check(*args):
    return subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True)


def test_a_call_into_a_higher_layer_fails_the_check(tmp_path):
    o = _objects(tmp_path)
    r = _check("--layer", "low", o["low"], "--layer", "high", o["high"])
    assert r.returncode == 1
    assert "low.o (layer low) calls high_fn (layer high)" in r.stderr


def test_calls_into_lower_layers_and_libc_pass(tmp_path):
    o = _objects(tmp_path)
    r = _check("--layer", "high", o["high"], "--layer", "low", o["low"])
    assert r.returncode == 0, r.stderr
