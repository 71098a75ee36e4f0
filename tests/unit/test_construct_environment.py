"""The node's environment for a construction: layers, their order, what is never taken."""

from __future__ import annotations

from pathlib import Path

from sglforge.construct.environment import (
    ASSUMED,
    Image,
    image_env,
    overlay,
    release_env,
    target_env,
)
from sglforge.scenario.file import load_scenario
from sglforge.standin.base import RELEASE_ENV
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]
TARGETS = load_targets(REPO)


def test_the_release_images_list_then_the_target_then_the_scenario() -> None:
    scenario = load_scenario(REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml")
    for name, gfx in (("mi355x", "gfx950"), ("mi300x", "gfx942")):
        target = TARGETS.resolve(name)
        env = target_env(gfx, target, scenario)
        got = env.as_dict()
        assert set(RELEASE_ENV) <= set(got) and got["GPU_ARCH"] == got["GPU_ARCH_LIST"] == gfx
        assert target.env.items() <= got.items()
        assert scenario.container.env.items() <= got.items()
        assert env.sources[1] == f"targets.toml [targets.{name}.env]"
        assert env.sources[2] == f"{scenario.path} [container.env]"


def test_a_later_layer_wins_and_credentials_are_never_taken() -> None:
    env = overlay(
        [
            ("image", {"SGLANG_USE_AITER": "1", "HF_TOKEN": "a", "X": "1"}),
            ("scenario", {"SGLANG_USE_AITER": "0", "REGISTRY_PASSWORD": "b", "AWS_REGION": "c"}),
        ]
    )
    assert env.as_dict() == {"SGLANG_USE_AITER": "0", "X": "1"}
    assert env.left_out == ("AWS_REGION", "HF_TOKEN", "REGISTRY_PASSWORD")
    text = env.describe() + str(env.to_dict())
    assert "left out as credentials: AWS_REGION, HF_TOKEN, REGISTRY_PASSWORD" in text
    assert "'a'" not in text and "'b'" not in text  # names, never values


def test_an_images_own_env_less_its_paths() -> None:
    entries = [
        "PATH=/opt/conda/bin:/usr/bin",
        "LD_LIBRARY_PATH=/opt/rocm/lib",
        "ROCM_PATH=/opt/rocm",
        "SGLANG_USE_AITER=1",
        "PYTORCH_ROCM_ARCH=gfx942;gfx950",
        "EMPTY=",
        "NOT_AN_ASSIGNMENT",
    ]
    assert image_env(entries) == {
        "SGLANG_USE_AITER": "1",
        "PYTORCH_ROCM_ARCH": "gfx942;gfx950",
        "EMPTY": "",
    }
    image = Image("lmsysorg/sglang:v0.5.14-rocm700-mi35x", tuple(entries), (("triton", "3.5.1"),))
    env = target_env("gfx950", base=image)
    assert env.sources == ("the ENV of image lmsysorg/sglang:v0.5.14-rocm700-mi35x",)
    assert "GPU_ARCH" not in env.as_dict()  # the image's own list, not the replica's
    assert release_env("gfx942")["GPU_ARCH"] == "gfx942"
    # the shims state the image's triton, and the report says where it came from
    assert env.packages == (("triton", "3.5.1"),)
    assert "packages triton 3.5.1 (read from image lmsysorg/sglang" in env.describe()
    unknown = target_env("gfx950")
    assert dict(unknown.packages) == ASSUMED and "assumed" in unknown.describe()
