"""Tests of ltvlib.cache: keys, atomic writes, JSON memoisation."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ltvlib import cache


@dataclasses.dataclass
class Cfg:
    model: str
    layer: int
    lr: float = 1e-3
    tags: tuple[str, ...] = ("a", "b")


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LTV_CACHE_DIR", str(root))
    return root


def test_cache_root_env_and_default(tmp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache.cache_root() == tmp_cache
    monkeypatch.delenv("LTV_CACHE_DIR")
    assert cache.cache_root() == Path.home() / ".cache" / "ltv-book"


def test_code_version_shape_and_memoised() -> None:
    v = cache.code_version()
    version, _, digest = v.partition("+")
    assert version and len(digest) == 12
    assert cache.code_version() is v  # computed once


def test_config_key_stable_across_dict_order_and_equal_objects() -> None:
    a = {"x": 1, "y": [1, 2.5, None, True], "p": Path("/a/b")}
    b = {"p": Path("/a/b"), "y": [1, 2.5, None, True], "x": 1}
    assert cache.config_key(a) == cache.config_key(b)
    assert cache.config_key(Cfg("m", 3)) == cache.config_key(Cfg("m", 3))
    assert len(cache.config_key(a)) == 64


@pytest.mark.parametrize(
    "other",
    [
        Cfg("m", 4),
        Cfg("m2", 3),
        Cfg("m", 3, lr=1e-4),
        Cfg("m", 3, tags=("a",)),
        {"model": "m", "layer": 3, "lr": 1e-3, "tags": ["a", "b"]},  # same fields, not the dataclass
    ],
)
def test_config_key_sensitive(other: object) -> None:
    assert cache.config_key(Cfg("m", 3)) != cache.config_key(other)


def test_config_key_distinguishes_types() -> None:
    keys = {cache.config_key(v) for v in (1, 1.0, True, "1", None, [1], Path("1"))}
    assert len(keys) == 7


def test_config_key_depends_on_code_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cache.config_key({"a": 1})
    monkeypatch.setattr(cache, "code_version", lambda: "9.9+deadbeef0000")
    assert cache.config_key({"a": 1}) != before


def test_config_key_type_error_names_type() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match="Opaque"):
        cache.config_key({"a": [Opaque()]})
    with pytest.raises(TypeError, match="set"):
        cache.config_key({1, 2})
    with pytest.raises(TypeError, match="int"):
        cache.config_key({1: "non-str key"})


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_roundtrip_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    cache.atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "b": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    cache.atomic_write_text(target, "new")
    assert target.read_text() == "new"
    cache.atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _leftovers(target.parent) == []


def test_atomic_write_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        cache.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_atomic_write_failure_mid_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        cache.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_write_json_unserialisable_touches_nothing(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("{}")
    with pytest.raises(TypeError):
        cache.atomic_write_json(target, {"x": object()})
    assert target.read_text() == "{}"
    assert _leftovers(tmp_path) == []


def test_cached_json_computes_once(tmp_cache: Path) -> None:
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"acc": 0.5, "per_layer": (1, 2)}

    cfg = Cfg("m", 3)
    first = cache.cached_json("icl", cfg, compute)
    second = cache.cached_json("icl", cfg, compute)
    assert first == second == {"acc": 0.5, "per_layer": [1, 2]}
    assert len(calls) == 1

    files = list((tmp_cache / "results" / "icl").glob("*.json"))
    assert [f.stem for f in files] == [cache.config_key(cfg)]
    record = json.loads(files[0].read_text())
    assert record["config"]["model"] == "m" and record["code_version"] == cache.code_version()

    cache.cached_json("icl", Cfg("m", 4), compute)
    assert len(calls) == 2


def test_cached_json_recomputes_corrupt_file(tmp_cache: Path) -> None:
    path = cache.cache_path("x", {"a": 1}, ".json", area="results")
    path.write_text("{truncated")
    assert cache.cached_json("x", {"a": 1}, lambda: {"v": 1}) == {"v": 1}
    assert json.loads(path.read_text())["value"] == {"v": 1}


def test_cached_json_rejects_non_dict() -> None:
    with pytest.raises(TypeError, match="dict"):
        cache.cached_json("x", {}, lambda: [1])  # type: ignore[arg-type,return-value]


def test_cache_path(tmp_cache: Path) -> None:
    p = cache.cache_path("ltv/gsm", {"a": 1}, "safetensors")
    assert p.parent == tmp_cache / "vectors" / "ltv" / "gsm" and p.parent.is_dir()
    assert p.name == cache.config_key({"a": 1}) + ".safetensors"
    for bad in ("../x", "/abs", "a/../b", ""):
        with pytest.raises(ValueError):
            cache.cache_path(bad, {}, ".x")
    with pytest.raises(ValueError):
        cache.cache_path("k", {}, ".x", area="elsewhere")
