"""CPU classes: the AVX2-only build of llama.cpp serves on request, passes its native check, and every
cache keyed by the build (native checks, measured costs, the daemon) keeps the classes apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codecue.backends import cpu_class
from codecue.errors import CodeCueError
from harness.runtimes import need, need_llama_cpp


def need_avx2_build() -> None:
    directory = cpu_class.lib_dir("avx2")
    need(directory is not None and (directory / "libllama.so").is_file(),
         "the avx2 class of llama.cpp is not built (bash scripts/build_llama_cpp.sh --class avx2)")


def test_class_comes_from_the_environment_and_is_validated(monkeypatch):
    monkeypatch.delenv(cpu_class.ENV, raising=False)
    assert cpu_class.cpu_class() == "native" and cpu_class.lib_dir() is None
    monkeypatch.setenv(cpu_class.ENV, "avx2")
    assert cpu_class.cpu_class() == "avx2"
    assert cpu_class.lib_dir() == cpu_class.build_dir("avx2") / "lib"
    monkeypatch.setenv(cpu_class.ENV, "avx1024")
    with pytest.raises(CodeCueError, match="not a CPU class"):
        cpu_class.cpu_class()
    with pytest.raises(CodeCueError, match="not a CPU class"):
        cpu_class.select_cpu_class("sse2")


def test_caches_and_the_daemon_are_kept_per_class(monkeypatch, tmp_path):
    from codecue.server.daemon import client as daemon_client
    from codecue.tuning.machine_costs import costs_key

    monkeypatch.setenv("CODECUE_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv(cpu_class.ENV, raising=False)
    native = (cpu_class.llamacpp_build(), daemon_client.socket_path(), costs_key("llamacpp", "t", "d"))
    monkeypatch.setenv(cpu_class.ENV, "avx2")
    avx2 = (cpu_class.llamacpp_build(), daemon_client.socket_path(), costs_key("llamacpp", "t", "d"))
    assert native[1].name == "codecue.sock" and avx2[1].name == "codecue-avx2.sock"
    assert daemon_client.pid_path().name == "daemon-avx2.pid"
    if cpu_class.package_version() is not None:
        assert avx2[0].endswith("(avx2 build)") and native[0] != avx2[0]
    assert native[2] != avx2[2]  # costs measured on one build are never taken for the other's


def test_a_missing_class_build_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(cpu_class.ENV, "avx2")
    from codecue.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable) as caught:
        cpu_class.library_path()
    assert "--class avx2" in caught.value.fix


_PROBE = """
import json, sys
from codecue.backends.llamacpp import _load_lib
from codecue.backends.native_check import safe_llamacpp_layout
info = _load_lib().llama_print_system_info().decode()
maps = sorted({line.split()[-1] for line in open('/proc/self/maps') if 'libllama' in line or 'libggml' in line})
layout, refused = safe_llamacpp_layout(__import__('pathlib').Path(sys.argv[1]))
print(json.dumps({"info": info, "maps": maps, "layout": layout, "refused": refused}))
"""


def test_the_avx2_build_serves_and_passes_its_native_check(tmp_path):
    """In a process told to serve the avx2 class, llama.cpp's own report lists no AVX-512 and the libraries
    mapped are the class's; its child-process native check on a model passes (what CI requires of it)."""
    need_llama_cpp()
    need_avx2_build()
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf")
    env = dict(os.environ, CODECUE_CPU_CLASS="avx2", CODECUE_NATIVE_CHECK="1")
    done = subprocess.run([sys.executable, "-c", _PROBE, str(model)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "AVX2 = 1" in report["info"] and "AVX512 = 1" not in report["info"]
    expected = str(cpu_class.lib_dir("avx2"))
    assert report["maps"] and all(path.startswith(expected) for path in report["maps"]), report["maps"]
    assert report["layout"] is not None, report["refused"]


def test_native_and_avx2_give_the_same_greedy_tokens(tmp_path):
    """Both classes compute the same model: greedy decoding of a tiny model agrees token for token (the
    kernels differ; on a random tiny model with a wide logit scale the argmax does not)."""
    need_llama_cpp()
    need_avx2_build()
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf")
    script = ("import json, sys\nfrom pathlib import Path\nfrom codecue.backends.llamacpp import LlamaCppBackend\n"
              "b = LlamaCppBackend.load(Path(sys.argv[1]), n_ctx=256, repack=False)\n"
              "ids = b.tokenize('def add(a, b):\\n    return')\nout = []\n"
              "for _ in range(16):\n    t = int(b.forward(ids + out)[-1].argmax()) if not out else "
              "int(b.forward([out[-1]])[-1].argmax())\n    out.append(t)\n"
              "print(json.dumps(out))\n")
    outputs = {}
    for cls in ("native", "avx2"):
        env = dict(os.environ, CODECUE_CPU_CLASS=cls)
        done = subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        outputs[cls] = json.loads(done.stdout.strip().splitlines()[-1])
    assert outputs["native"] == outputs["avx2"]
    assert len(outputs["native"]) == 16


def test_build_scripts_agree_with_python_on_where_builds_live():
    """The shell scripts ask Python for the directories (one home for the layout of the cache)."""
    root = Path(__file__).resolve().parents[1]
    for script in ("build_llama_cpp.sh", "build_llama_server.sh"):
        text = (root / "scripts" / script).read_text()
        assert "codecue.backends.cpu_class import" in text
        assert "llama_cpp_sources.sh" in text or script == "build_llama_cpp.sh"


def test_a_benchmarks_cpu_class_flag_selects_the_class_before_it_runs(monkeypatch):
    """``codecue bench SUBCOMMAND --cpu-class avx2``: the benchmark's own parser reads the flag (cli.py never
    sees it), and what it runs (its models, its llama-server peers, its report) serves that class."""
    import types

    from codecue.commands import bench

    monkeypatch.setenv(cpu_class.ENV, "native")  # so that the class the benchmark selects is undone after
    seen: list[str] = []
    stand_in = types.SimpleNamespace(add_arguments=lambda parser: parser.add_argument("--cpu-class"),
                                     run=lambda args: seen.append(cpu_class.cpu_class()) or 0)
    monkeypatch.setattr(bench.importlib, "import_module", lambda name: stand_in)
    assert bench.run(types.SimpleNamespace(arguments=["speed", "--cpu-class", "avx2"])) == 0
    assert seen == ["avx2"]
    monkeypatch.setenv(cpu_class.ENV, "native")
    assert bench.run(types.SimpleNamespace(arguments=["speed"])) == 0
    assert seen == ["avx2", "native"]


def test_llama_cpp_loaded_before_the_class_was_chosen_is_refused(tmp_path):
    """A process that imported llama-cpp-python (so loaded the native library) and then asked for the AVX2
    class must not serve the native build under the AVX2 name: its checks, costs and reports would lie."""
    need_avx2_build()
    script = ("import os, llama_cpp.llama_cpp\n"
              "os.environ['CODECUE_CPU_CLASS'] = 'avx2'\n"
              "from codecue.backends.llamacpp import _load_lib\n"
              "from codecue.errors import BackendUnavailable\n"
              "try:\n    _load_lib()\nexcept BackendUnavailable as e:\n    print('refused:', e)\n"
              "else:\n    print('served')\n")
    env = {k: v for k, v in os.environ.items() if k not in (cpu_class.ENV, "LLAMA_CPP_LIB_PATH")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: llama.cpp was loaded from"), out.stdout
    assert "before the avx2 class was chosen" in out.stdout
