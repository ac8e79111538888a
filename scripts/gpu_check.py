"""The GPU check behind ``scripts/gpu_check.sh``: conformance of each GPU backend, then a speed table.

Steps (run in order; ``all`` = every step in one process):

- ``prepare``: build the speed step's models. On the GPU: random-weight Qwen2 models with the real shapes
  of Qwen2.5-Coder-1.5B (target) and -0.5B (draft), saved as FP16 safetensors (the real 1.6 GB models
  cannot travel to the GPU machine). With ``--tiny``: tiny models.
  The output head is scaled up (as in tests/harness/tiny_models.py) so that distributions are peaked like a trained
  model's: then the target's greedy choice is rarely a near-tie and a self-draft is accepted ~always.
- ``conformance``: the conformance suite (tests/test_backend_conformance.py) run by pytest, on each
  backend: on the GPU its ``gpu``-marked runtimes (``pytest -m gpu``: torch on CUDA in float32, the suite's
  tolerances are for float32 logits, and exllamav2 in FP16); the outcome is read from pytest's JUnit XML.
- ``speed``: per backend, ms per target step, per draft step, per verification of K+1 tokens (K = 1..8),
  measured by the tuner's own cost measurement (:func:`codecue.tuning.machine_costs.measure_machine_costs`);
  and greedy generation target-only vs speculative with a self-draft (the target's own
  weights with a second cache: acceptance ~1, the upper bound) and with the draft model (random weights,
  unrelated to the target: acceptance ~0, the lower bound). torch runs bf16 on CUDA; exllamav2 FP16.
- ``report``: one markdown table (printed, and written under ``--out``) from the steps' JSON.

``--device cpu --tiny`` runs everything on tiny models on the CPU in well under a minute: the dry run
that checks this script (tests/test_backend_exllamav2.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# run from a checkout: the package, and the tests' tiny-model builders (tests/harness)
for _path in (REPO, REPO / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

BACKENDS = ("torch", "exllamav2")
STEPS = ("prepare", "conformance", "speed", "report")
VERIFY_KS = tuple(range(1, 9))

# The real models' config.json (Qwen2.5-Coder-1.5B / -0.5B): what sets the cost of a step.
QWEN_SHAPES: dict[str, dict[str, Any]] = {
    "target-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                        num_key_value_heads=2, vocab_size=151936),
    "draft-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, vocab_size=151936),
}


# -- models ------------------------------------------------------------------------------------------------


def build_random_qwen2(path: Path, shape: dict[str, Any], seed: int, device: str, logit_scale: float = 8.0) -> Path:
    """A random-weight Qwen2 with ``shape`` (tied embeddings, like the real ones), saved as FP16 safetensors."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if (path / "config.json").is_file():
        return path
    config = Qwen2Config(**shape, max_position_embeddings=32768, rope_theta=1_000_000.0, tie_word_embeddings=True,
                         rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151643)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(logit_scale)  # tied: this is the output head too
    model = model.to(torch.float16)
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(str(tmp))
    tmp.rename(path)
    del model
    return path


def model_dirs(work: Path, tiny: bool) -> dict[str, Path]:
    """The models the speed step uses; ``prepare`` builds them, the others only read them."""
    if tiny:
        return {"target": work / "tiny-target", "draft": work / "tiny-draft"}
    return {"target": work / "target-1.5b", "draft": work / "draft-0.5b"}


def prepare(work: Path, tiny: bool, device: str) -> dict[str, Any]:
    from harness.tiny_models import build_tiny_model_dir

    work.mkdir(parents=True, exist_ok=True)
    dirs = model_dirs(work, tiny)
    started = time.perf_counter()
    for role, seed in (("target", 0), ("draft", 1)):
        if tiny:
            if not (dirs[role] / "config.json").is_file():
                build_tiny_model_dir(dirs[role], seed=seed)
        else:
            build_random_qwen2(dirs[role], QWEN_SHAPES[dirs[role].name], seed, device)
    sizes = {role: sum(f.stat().st_size for f in path.glob("*.safetensors")) for role, path in dirs.items()}
    return {"seconds": round(time.perf_counter() - started, 1), "models": {k: str(v) for k, v in dirs.items()},
            "bytes": sizes}


# -- backends --------------------------------------------------------------------------------------------


class Unavailable(Exception):
    """This backend cannot run here (the reason goes into the table)."""


def load_backend(name: str, path: Path, device: str, max_seq_len: int) -> Any:
    """A backend for the speed step: torch in bf16 on CUDA (float32 on the CPU), exllamav2 in FP16."""
    from codecue.errors import BackendUnavailable

    if name == "torch":
        from codecue.backends.torch_backend import TorchBackend

        dtype = "bfloat16" if device == "cuda" else "float32"
        return TorchBackend.from_pretrained(path, dtype=dtype, device=device)
    if name == "exllamav2":
        from codecue.backends.exllamav2 import ExLlamaV2Backend

        try:
            return ExLlamaV2Backend.load(path, max_seq_len=max_seq_len)
        except BackendUnavailable as exc:
            raise Unavailable(str(exc)) from None
    raise ValueError(f"unknown backend {name!r}")


def second_context(backend: Any) -> Any:
    """The same weights with a second cache: a draft that agrees with the target (acceptance ~1)."""
    if backend.name == "torch":
        from codecue.backends.torch_backend import TorchBackend

        return TorchBackend(backend.model, device=backend.device)
    return backend.with_new_cache()


def backend_label(name: str, device: str, purpose: str) -> str:
    if name == "torch":
        return f"torch {device} {'bf16' if purpose == 'speed' and device == 'cuda' else 'fp32'}"
    return "exllamav2 fp16"


# -- conformance -------------------------------------------------------------------------------------------

CONFORMANCE_SUITE = REPO / "tests" / "test_backend_conformance.py"


def conformance_runtime(name: str, device: str) -> str:
    """The suite's id for a runtime: torch on the GPU is its own (``gpu``-marked) runtime there."""
    return "torch_cuda" if name == "torch" and device == "cuda" else name


def run_conformance(name: str, device: str, results: Path) -> dict[str, Any]:
    """The conformance suite (tests/test_backend_conformance.py) on one runtime, run by pytest itself:
    ``-m gpu`` selects the GPU runtimes, ``-k`` the one asked for; the outcome is read from its JUnit XML."""
    import pytest

    runtime = conformance_runtime(name, device)
    junit = results / f"conformance-{name}.xml"
    keyword = "torch and not torch_cuda" if runtime == "torch" else runtime
    args = [str(CONFORMANCE_SUITE), "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}", "-k", keyword]
    if device == "cuda":
        args += ["-m", "gpu"]
    pytest.main(args)
    outcomes = junit_outcomes(junit, runtime)
    if outcomes and all(v.startswith("skipped") for v in outcomes.values()):
        return {"unavailable": next(iter(outcomes.values())).removeprefix("skipped: ")}
    counts = {state: sum(r.startswith(state) for r in outcomes.values()) for state in ("passed", "failed", "error", "skipped")}
    return {"label": backend_label(name, device, "conformance"), "counts": counts, "results": outcomes}


def junit_outcomes(junit: Path, runtime: str) -> dict[str, str]:
    """Each test case of ``runtime`` in a JUnit XML report: "passed", or "failed: ..." etc. with the message."""
    import xml.etree.ElementTree as ElementTree

    if not junit.is_file():
        return {}
    outcomes: dict[str, str] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        name = case.get("name", "")
        params = name.partition("[")[2].rstrip("]").split("-")
        if runtime not in params:
            continue
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                message = (found.get("message") or found.text or "").strip().splitlines()
                state = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                outcome = f"{state}: {message[0][:300] if message else ''}"
                break
        outcomes[name] = outcome
    return outcomes


# -- speed ------------------------------------------------------------------------------------------------


def step_costs(target: Any, draft: Any, prompt_tokens: int, reps: int) -> dict[str, float]:
    """ms for: prefill per token, one target step, one draft step, verification of K+1 tokens; measured
    by the tuner's own cost measurement (what the server does in idle time), on these backends."""
    from codecue.completion import Completer
    from codecue.models.config import DecodingSettings
    from codecue.tuning.machine_costs import measure_machine_costs, probe_text
    from harness.tiny_models import build_tokenizer

    completer = Completer(build_tokenizer(), target, draft, DecodingSettings(draft_vocab="full"))
    measured = measure_machine_costs(completer, probe_text(), k_max=max(VERIFY_KS), repeats=reps,
                                     prefill_tokens=min(128, prompt_tokens), min_context=prompt_tokens)
    assert measured.costs is not None  # measured with a draft
    step = measured.target_step_ms
    out = {"prefill_per_token": measured.prefill_ms_per_token, "target_step": step,
           "draft_step": measured.costs.draft_cost * step}
    for k in VERIFY_KS:
        out[f"verify_{k + 1}"] = measured.costs.verify_cost(k) * step
    return out


def generation(target: Any, drafter: Any | None, prompt: list[int], new_tokens: int, k: int) -> dict[str, Any]:
    from codecue.backends.kv_cache import CachedSequence
    from codecue.engine.proposers import DraftModelProposer
    from codecue.engine.sampling import Sampling
    from codecue.engine.speculative import GenerationParams, generate

    target.reset()
    proposer = None
    if drafter is not None:
        drafter.reset()
        proposer = DraftModelProposer(CachedSequence(drafter), Sampling())
    result = generate(CachedSequence(target), proposer, prompt, GenerationParams(max_new_tokens=new_tokens, k=k),
                      decode=lambda ids: " ".join(map(str, ids)), eos_ids=())
    s = result.stats
    return {"tokens": result.tokens, "ms_per_token": s.tpot_ms, "ttft_ms": s.ttft_ms, "total_ms": s.total_ms,
            "acceptance": s.acceptance_rate, "tokens_per_round": s.tokens_per_round, "rounds": s.rounds}


def run_speed(name: str, dirs: dict[str, Path], device: str, prompt_tokens: int, new_tokens: int, reps: int,
              k: int) -> dict[str, Any]:
    max_seq_len = prompt_tokens + new_tokens + 2 * max(VERIFY_KS) + 16
    started = time.perf_counter()
    try:
        target = load_backend(name, dirs["target"], device, max_seq_len)
        draft = load_backend(name, dirs["draft"], device, max_seq_len)
    except Unavailable as exc:
        return {"unavailable": str(exc)}
    load_s = time.perf_counter() - started
    self_draft = second_context(target)
    rng = random.Random(0)
    prompt = [rng.randrange(1, target.vocab_size) for _ in range(prompt_tokens)]
    costs = step_costs(target, draft, prompt_tokens, reps)
    generation(target, None, prompt, min(8, new_tokens), 0)  # warm-up (kernels, graphs, allocator)
    gen = {"target_only": generation(target, None, prompt, new_tokens, 0),
           "self_draft": generation(target, self_draft, prompt, new_tokens, k),
           "draft": generation(target, draft, prompt, new_tokens, k)}
    reference = gen["target_only"]["tokens"]
    for key in ("self_draft", "draft"):
        tokens = gen[key]["tokens"]
        gen[key]["identical"] = tokens == reference
        gen[key]["first_difference"] = next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b),
                                            None if len(tokens) == len(reference) else min(len(tokens), len(reference)))
        gen[key]["speedup"] = gen["target_only"]["ms_per_token"] / gen[key]["ms_per_token"] if gen[key]["ms_per_token"] else None
    for value in gen.values():
        value.pop("tokens")
    return {"label": backend_label(name, device, "speed"), "load_seconds": round(load_s, 1), "costs_ms": costs,
            "generation": gen, "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "k": k,
            "models": {"target": str(dirs["target"]), "draft": str(dirs["draft"])}}


# -- report --------------------------------------------------------------------------------------------------


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "python": platform.python_version(),
                           "torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = f"{props.name}, {props.total_memory / 1024**3:.0f} GiB, sm_{props.major}{props.minor}"
    else:
        env["gpu"] = f"none (CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    try:
        from importlib.metadata import version

        env["exllamav2"] = version("exllamav2")
    except Exception:  # noqa: BLE001 - not installed
        env["exllamav2"] = sys.modules["exllamav2"].__version__ if "exllamav2" in sys.modules else None
    return env


def _read(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _cell(entry: dict[str, Any] | None, fn: Callable[[dict[str, Any]], str]) -> str:
    if entry is None:
        return "not run"
    if "unavailable" in entry:
        return "n/a"
    if "crashed" in entry:
        return "crashed"
    return fn(entry)


def _spec(g: dict[str, Any]) -> str:
    speedup = f"{g['speedup']:.2f}x" if g.get("speedup") else "-"
    same = "" if g.get("identical") else f", differs at token {g.get('first_difference')}"
    return f"{g['ms_per_token']:.2f} ms ({speedup}, acc {g['acceptance']:.2f}, {g['tokens_per_round']:.1f} tok/round{same})"


def render_report(results: Path, backends: tuple[str, ...]) -> str:
    env = _read(results, "environment") or {}
    prep = _read(results, "prepare") or {}
    conf = {b: _read(results, f"conformance-{b}") for b in backends}
    speed = {b: _read(results, f"speed-{b}") for b in backends}
    build = _read(results, "exllamav2-build")
    lines = [f"## CodeCue GPU check — {env.get('date', '?')}", "",
             f"Machine: {env.get('gpu', '?')}; torch {env.get('torch', '?')} (CUDA {env.get('cuda')}), "
             f"Python {env.get('python', '?')}, exllamav2 {env.get('exllamav2') or 'not installed'}."]
    if build:
        lines.append(f"exllamav2 extension build: {build.get('status')} in {build.get('seconds')} s.")
    any_speed = next((s for s in speed.values() if s and "costs_ms" in s), None)
    if any_speed:
        target_name = Path(any_speed["models"]["target"]).name
        kind = ("tiny random models (dry run)" if target_name.startswith("tiny") else
                "random weights with the real Qwen2.5-Coder shapes, FP16 safetensors")
        lines.append(f"Speed models: {target_name} / {Path(any_speed['models']['draft']).name} ({kind}); "
                     f"prompt {any_speed['prompt_tokens']} tokens, {any_speed['new_tokens']} new tokens, greedy, "
                     f"K = {any_speed['k']}. Conformance: tiny random models.")
    lines.append("")
    labels = [_cell(speed[b], lambda e: e["label"]) if speed[b] and "label" in speed[b] else b for b in backends]
    lines.append("| | " + " | ".join(labels) + " |")
    lines.append("|---|" + "---|" * len(backends))

    def row(title: str, fn: Callable[[dict[str, Any]], str], table: dict[str, Any]) -> None:
        lines.append(f"| {title} | " + " | ".join(_cell(table[b], fn) for b in backends) + " |")

    row("conformance suite", lambda e: f"{e['counts']['passed']} passed, {e['counts']['failed']} failed, "
        f"{e['counts']['error']} errors, {e['counts']['skipped']} skipped ({e['label']})", conf)
    row("load target + draft, s", lambda e: f"{e['load_seconds']:.1f}", speed)
    row("prefill, ms per token", lambda e: f"{e['costs_ms']['prefill_per_token']:.3f}", speed)
    row("target step (1 token), ms", lambda e: f"{e['costs_ms']['target_step']:.2f}", speed)
    row("draft step (1 token), ms", lambda e: f"{e['costs_ms']['draft_step']:.2f}", speed)
    for k in VERIFY_KS:
        row(f"verify K+1 = {k + 1} tokens (K = {k}), ms",
            lambda e, k=k: f"{e['costs_ms'][f'verify_{k + 1}']:.2f} ({e['costs_ms'][f'verify_{k + 1}'] / e['costs_ms']['target_step']:.2f}x a step)",
            speed)
    row("target-only, ms/token", lambda e: f"{e['generation']['target_only']['ms_per_token']:.2f}", speed)
    row("speculative, self-draft (acceptance ~1)", lambda e: _spec(e["generation"]["self_draft"]), speed)
    row("speculative, draft model (unrelated random: acceptance ~0)", lambda e: _spec(e["generation"]["draft"]), speed)
    notes = []
    for b in backends:
        for entry in (conf[b], speed[b]):
            if entry and "unavailable" in entry:
                notes.append(f"- {b}: {entry['unavailable']}")
                break
            if entry and "crashed" in entry:
                notes.append(f"- {b}: crashed: {entry['crashed']}")
                break
        if conf[b] and "results" in conf[b]:
            bad = {k: v for k, v in conf[b]["results"].items() if not v.startswith(("passed", "skipped"))}
            notes += [f"- {b} conformance {k}: {v}" for k, v in bad.items()]
    if build and build.get("status") != "ok" and build.get("log_tail"):
        notes.append("- exllamav2 build log (end): " + " / ".join(build["log_tail"][-5:]))
    if prep:
        notes.append(f"- models built in {prep.get('seconds')} s")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


# -- main ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="+", choices=[*STEPS, "all"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="tiny models only (the CPU dry run)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: torch,exllamav2")
    parser.add_argument("--work", type=Path, default=Path("/tmp/codecue-gpu-check/models"), help="where models are built")
    parser.add_argument("--results", type=Path, default=None, help="step results (JSON); default: --out/gpu_check")
    parser.add_argument("--out", type=Path, default=None, help="the folder for the steps' JSON and the table (default: gpu-check/ in the checkout)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 512 (GPU) / 48 (--tiny)")
    parser.add_argument("--new-tokens", type=int, default=None, help="default 128 (GPU) / 24 (--tiny)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per cost (default 20 / 3)")
    parser.add_argument("--k", type=int, default=4, help="draft depth for the speculative runs")
    args = parser.parse_args(argv)
    args.backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    args.steps = list(STEPS) if "all" in args.steps else args.steps
    args.prompt_tokens = args.prompt_tokens or (48 if args.tiny else 512)
    args.new_tokens = args.new_tokens or (24 if args.tiny else 128)
    args.reps = args.reps or (3 if args.tiny else 20)
    args.out = args.out or REPO / "gpu-check"
    args.results = args.results or args.out / "gpu_check"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and set(args.steps) - {"report"} and not torch.cuda.is_available():
        print("gpu_check: --device cuda but torch sees no CUDA GPU (use --device cpu --tiny for the dry run)",
              file=sys.stderr)
        return 2
    if args.tiny:
        # Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP's spinning threads
        # make each step hundreds of times slower: keep the dry run quick and unaffected by load.
        torch.set_num_threads(1)
    from codecue.paths import atomic_write_text

    args.results.mkdir(parents=True, exist_ok=True)

    def save(name: str, data: dict[str, Any]) -> None:
        atomic_write_text(args.results / f"{name}.json", json.dumps(data, indent=2))

    dirs = model_dirs(args.work, args.tiny)
    for step in args.steps:
        started = time.perf_counter()
        if step == "prepare":
            save("prepare", prepare(args.work, args.tiny, args.device))
            save("environment", environment(args.device))
        elif step in ("conformance", "speed"):
            for name in args.backends:
                try:
                    if step == "conformance":
                        data = run_conformance(name, args.device, args.results)
                    else:
                        data = run_speed(name, dirs, args.device, args.prompt_tokens, args.new_tokens, args.reps, args.k)
                except Exception as exc:  # noqa: BLE001 - record it and go on with the other backend
                    traceback.print_exc()
                    data = {"crashed": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
                save(f"{step}-{name}", data)
                summary = data.get("counts") or data.get("unavailable") or data.get("crashed") or "done"
                print(f"[gpu_check] {step} {name}: {summary}", flush=True)
        elif step == "report":
            if not (args.results / "environment.json").is_file():
                save("environment", environment(args.device))
            table = render_report(args.results, args.backends)
            print(table)
            args.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.out / "gpu_check.md", table)
        print(f"[gpu_check] {step}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
