"""K profiles: TOML round trip, atomic writes, and broken profiles giving warnings and the defaults."""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path

import pytest

from codecue.context import CONTEXT_CLASSES, available_languages
from codecue.tuning import (
    ClassProfile,
    CostModel,
    KPolicy,
    Profile,
    default_profile,
    dumps_profile,
    load_profile,
    save_profile,
    user_profile_path,
)
from codecue.tuning.profile import DEFAULT_PROFILE_PATH


@pytest.fixture(autouse=True)
def private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config"
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(config))
    return config

#: costs where drafting pays (the K authority serves K = 0 without measured costs)
CHEAP = CostModel(draft_cost=0.05, verify_per_token=0.0)


def sample_profile() -> Profile:
    profile = Profile(
        costs=CostModel(draft_cost=0.21, verify_per_token=0.04, verify_costs=(1.0, 1.03, 1.07, 1.12)),
        k_max=10,
        source="codecue tune",
        created="2026-01-02T03:04:05Z",
        models={"target": "/models/t.gguf", "draft": 'd "quoted" \\ name'},
        notes="line one\nline two é😀",
    )
    profile.set_entry("python", "call_arguments", ClassProfile(5, 0.8123, 1200, 1.91))
    profile.set_entry("python", "comment", ClassProfile(0, 0.12, 300, 1.0))
    profile.set_entry("c++-ish", "import", ClassProfile(3))
    return profile


def test_round_trip(tmp_path: Path) -> None:
    profile = sample_profile()
    path = save_profile(profile, tmp_path / "p.toml")
    loaded = load_profile(path)
    assert loaded.warnings == []
    assert loaded.costs == profile.costs
    assert loaded.k_max == 10
    assert (loaded.source, loaded.created, loaded.models, loaded.notes) == (
        profile.source,
        profile.created,
        profile.models,
        profile.notes,
    )
    assert loaded.languages == profile.languages
    assert dumps_profile(loaded) == dumps_profile(profile)
    # The file is plain TOML that other tools can read.
    assert tomllib.loads(path.read_text())["languages"]["python"]["comment"]["k"] == 0


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "profile.toml"
    save_profile(sample_profile(), path)
    first = path.read_text()
    updated = sample_profile()
    updated.set_entry("go", "string", ClassProfile(2))
    save_profile(updated, path)
    assert path.read_text() != first and "[languages.go]" in path.read_text()
    assert sorted(os.listdir(path.parent)) == ["profile.toml"]


def test_default_user_path(private_config_dir: Path) -> None:
    assert user_profile_path() == private_config_dir / "profile.toml"
    saved = save_profile(sample_profile())
    assert saved == private_config_dir / "profile.toml"
    assert load_profile().entry("python", "call_arguments") == ClassProfile(5, 0.8123, 1200, 1.91)


def test_missing_user_profile_gives_the_shipped_default(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        profile = load_profile()
    assert caplog.records == []
    assert profile.warnings == []
    assert profile.source == default_profile().source


def test_shipped_default_profile_is_complete() -> None:
    profile = load_profile(DEFAULT_PROFILE_PATH)
    assert profile.warnings == []
    for language in available_languages():
        for context_class in CONTEXT_CLASSES:
            assert profile.entry(language, context_class) is not None, (language, context_class)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("this is [not toml", "not valid TOML"),
        ("version = 99\n", "version 99"),
        ("[costs]\ndraft_cost = 'cheap'\n", "costs.draft_cost must be a number"),
        ("[costs]\nverify_costs = [1.5, 2.0]\n", "verify_costs[0]"),
        ("k_max = 0\n", "k_max must be in 1..64"),
        ("languages = 3\n", "[languages]"),
    ],
)
def test_corrupt_profile_warns_and_gives_defaults(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, reason: str
) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        profile = load_profile(path)
    assert any(reason in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    assert reason in profile.warnings[0]
    assert profile.source == default_profile().source  # the shipped defaults
    policy = KPolicy(profile=profile, costs=CHEAP)
    assert policy.k_for("python", "call_arguments") == default_profile().entry("python", "call_arguments").k


def test_binary_garbage_and_unreadable_profiles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "profile.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with caplog.at_level(logging.WARNING):
        assert "not UTF-8" in load_profile(path).warnings[0]
    directory = tmp_path / "a_directory.toml"
    directory.mkdir()
    assert "unusable" in load_profile(directory).warnings[0]
    missing = tmp_path / "missing.toml"
    assert "unusable" in load_profile(missing).warnings[0]  # an explicit path that is not there


def test_bad_entries_are_skipped_and_the_rest_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(
        "version = 1\n"
        "[languages.python]\n"
        "call_arguments = { k = 5, acceptance = 0.8 }\n"
        "comment = { k = -1 }\n"
        "string = { k = 3, acceptance = 1.5 }\n"
        "import = { k = 'four' }\n"
        "identifier = { k = 4, colour = 'red' }\n"
        "nonsense_class = { k = 4 }\n"
        "[languages.go]\n"
        "docstring = 7\n"
    )
    with caplog.at_level(logging.WARNING):
        profile = load_profile(path)
    assert profile.entry("python", "call_arguments") == ClassProfile(5, 0.8)
    for context_class in ("comment", "string", "import", "identifier", "nonsense_class"):
        assert profile.entry("python", context_class) is None
    assert profile.entry("go", "docstring") is None
    assert len(profile.warnings) == 6
    assert len(caplog.records) == 6
    policy = KPolicy(profile=profile, costs=CHEAP)
    assert policy.k_for("python", "call_arguments") == 5
    assert policy.k_for("python", "comment") == default_profile().entry("python", "comment").k  # the shipped one


def test_policy_load_and_save_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    save_profile(sample_profile(), path)
    policy = KPolicy.load(str(path))
    policy.use_costs(CHEAP)
    assert policy.settings.k_max == 10
    assert policy.k_for("python", "call_arguments") == 5
    for _ in range(50):
        policy.observe("python", "call_arguments", 5, 5)
    policy.save(str(path))
    again = load_profile(path)
    entry = again.entry("python", "call_arguments")
    assert entry is not None and entry.acceptance is not None and entry.acceptance > 0.8123
    assert entry.samples == 1200 + 50
    assert entry.k == policy.k_for("python", "call_arguments")
    assert again.entry("python", "comment") == ClassProfile(0, 0.12, 300, 1.0)  # untouched classes kept


def test_runtime_costs_round_trip_and_bad_runtime_tables(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    profile = Profile(models={"runtime": "torch+llamacpp"},
                      runtime_costs={"llamacpp": CostModel(0.65, 0.6, (1.0, 1.63, 2.24)),
                                     "torch+llamacpp": CostModel(0.1, 0.05, (1.0, 1.1))})
    path = save_profile(profile, tmp_path / "p.toml")
    again = load_profile(path)
    assert again.runtime_costs == profile.runtime_costs and again.runtime == "torch+llamacpp"
    assert again.runtime_costs["llamacpp"].verify_costs == (1.0, 1.63, 2.24)
    broken = tmp_path / "broken.toml"
    broken.write_text("version = 1\n[runtime_costs.llamacpp]\ndraft_cost = 'x'\n[runtime_costs.torch]\ndraft_cost = 0.2\n")
    loaded = load_profile(broken)
    assert set(loaded.runtime_costs) == {"torch"}
    assert any("runtime_costs.llamacpp.draft_cost" in w for w in loaded.warnings)


def test_server_keeps_what_the_policy_learned(private_config_dir: Path) -> None:
    """On idle unload and at shutdown the server writes the adapted profile (atomically) to the user's
    profile, so the next start begins from it; nothing is written when nothing was observed."""
    from codecue.server.worker.model_worker import ModelWorker

    policy = KPolicy(profile=Profile(), runtime="llamacpp")
    worker = ModelWorker(k_policy=policy)
    assert worker.save_learned_k() is False and not user_profile_path().exists()
    for _ in range(30):
        policy.observe("python", "call_arguments", 6, 6)
    assert worker.save_learned_k() is True
    saved = load_profile(user_profile_path())
    entry = saved.entry("python", "call_arguments")
    assert entry is not None and entry.acceptance is not None and entry.acceptance > 0.9 and entry.samples == 30
    assert saved.runtime == "llamacpp" and "learned by the server" in saved.source
    assert worker.save_learned_k() is False  # nothing new since
