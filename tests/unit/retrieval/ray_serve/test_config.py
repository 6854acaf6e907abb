"""The Ray Serve config: read, defaults, overrides, one-line errors, and the placement check."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from retrieval.index.root import IndexRoot
from retrieval.ray_serve.config import ReplicaSpec, check_placement, load_config
from tests.fixtures.docs import SMALL_WEB


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = IndexRoot(tmp_path_factory.mktemp("ray-config") / "index")
    index.publish(index.build(SMALL_WEB, shards=2))
    return index.root


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_and_a_shard_override(root: Path, tmp_path: Path) -> None:
    path = write(
        tmp_path, f'index = "{root}"\n[replicas]\ncount = 2\n[[shard]]\nid = 1\ncount = 3\nnum_cpus = 1\n'
    )
    config = load_config(path)
    assert config.shards == 2  # from the index, not the file
    assert config.replicas(0) == ReplicaSpec(2, 0.5, {})
    assert config.replicas(1) == ReplicaSpec(3, 1.0, {})
    assert load_config(path, replicas=4).replicas(0).count == 4  # the command line wins


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("colour = 1\n", "unknown key(s) colour"),
        ("[replicas]\ncount = 0\n", "count must be at least 1"),
        ("[replicas]\nnum_cpus = 'many'\n", "[replicas]"),
        ("[[shard]]\nid = 7\n", "shards 0 to 1"),
        ("[[shard]]\nid = 0\nreplicas = 2\n", "unknown key(s) replicas"),
        ("index = [\n", "Cannot read the Ray Serve config"),
    ],
)
def test_a_bad_config_is_one_clear_error(root: Path, tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_config(path, index=root)
    assert says in str(error.value)


def test_no_index_is_said(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Say which index"):
        load_config(None)
    with pytest.raises(ConfigError, match="Cannot serve"):
        load_config(None, index=tmp_path / "nothing")


def test_placement_is_checked_against_the_nodes(root: Path, tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "[replicas]\ncount = 2\nnum_cpus = 1\n[[shard]]\nid = 1\nresources = { big = 1 }\n"),
        index=root,
    )
    check_placement(config, [{"CPU": 2.0}, {"CPU": 2.0, "big": 2.0}])  # fits: shard 1 on the big node
    with pytest.raises(ConfigError, match="Shard 1 cannot be placed.*big 1"):
        check_placement(config, [{"CPU": 4.0}, {"CPU": 4.0}])  # nobody has "big"
    with pytest.raises(ConfigError, match="cannot be placed"):
        check_placement(config, [{"CPU": 1.0, "big": 2.0}, {"CPU": 1.0}])  # 4 CPUs wanted, 2 there
