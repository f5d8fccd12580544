"""Builds torch_tpu: CMake compiles the C runtime and the C++ bridge into
torch_tpu/_C*.so against the installed torch (no build isolation)."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        build_dir = os.path.join(ROOT, "build", "py")
        lib_dir = os.path.join(build_dir, "lib")
        os.makedirs(build_dir, exist_ok=True)
        jobs = str(os.cpu_count() or 2)
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # do not load a stale build
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}", "-DTPU_BUILD_TESTS=OFF",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={lib_dir}",
        ])
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs, "--target", "tpu_bridge"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Atomic replace: a running process keeps the module it has mapped.
        tmp = target + ".tmp"
        shutil.copy2(os.path.join(lib_dir, os.path.basename(target)), tmp)
        os.replace(tmp, target)


setup(ext_modules=[CMakeExtension("torch_tpu._C")], cmdclass={"build_ext": CMakeBuild})
