"""``sglforge configs``: click code over ``sglforge.coverage``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.options import scenario_option
from sglforge.errors import EXIT_PROBLEMS, ConfigError

if TYPE_CHECKING:
    from sglforge.coverage import Lookup, Shape


@main.group("configs")
def configs_group() -> None:
    """Tuned kernel tables: which rows a launch will use, before a GPU runs."""


@configs_group.command("coverage")
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The checkpoint folder (its config.json; no weights needed).",
)
@scenario_option(
    "Smoke scenario (NAME or file) whose launch flags and container env are used.", required=True
)
@click.option("--base-image", metavar="IMG", help="Read the base's aiter tables from this image.")
@click.option(
    "--aiter-configs",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The base's aiter/configs folder (instead of --base-image).",
)
@click.option(
    "--aiter-commit",
    metavar="SHA",
    help="With --aiter-configs: the aiter commit whose lookup rule applies (default: the "
    "checkout's fused_moe.py next to DIR, else aiter 9127c94a18e4's rule).",
)
@click.option(
    "--sglang",
    "tree",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A release's python/ folder (default: the pin's tree from `sglforge patches apply`).",
)
@click.option("--gfx", help="GPU arch (default: the scenario's target's, else gfx950).")
@click.option(
    "--untuned",
    "untuned",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write aiter's untuned CSV with exactly the missing keys (the tuner's -i input).",
)
@json_option
@pass_state
def coverage_cmd(
    st: State,
    model_dir: Path,
    scenario: str,
    base_image: str | None,
    aiter_configs: Path | None,
    aiter_commit: str | None,
    tree: Path | None,
    gfx: str | None,
    untuned: Path | None,
    as_json: bool,
) -> None:
    """List every fused-MoE lookup a launch makes and whether a tuned row answers it.

    The shapes come from the pinned sglang's own model construction (main model and MTP
    draft) for the scenario's flags; they are matched the way the base's aiter looks rows up
    (its key columns and token buckets, read from its own aiter/fused_moe.py) against its
    tables plus the queue's config items. Exits 1 when a hot shape (the main model's layers)
    misses.

    \b
    Example:
      git -C AITER archive 9127c94a18e4 aiter/configs aiter/fused_moe.py \\
          | tar -x -C build/aiter-base   # its fused_moe.py gives the lookup rule
      sglforge configs coverage --model /data/GLM-5.2-MXFP4 \\
          --scenario smoke/glm5-mxfp4-mtp-mi355x.toml --aiter-configs build/aiter-base/aiter/configs
      # the misses as the tuner's input, for aiter's gemm_moe_tune.py -i on the GPU node:
      sglforge configs coverage ... --untuned build/untuned_fmoe.csv
    """
    from sglforge import coverage
    from sglforge.queue.configs import base_tables_from_dir

    if (base_image is None) == (aiter_configs is None):
        raise ConfigError(
            "give exactly one of --base-image IMG and --aiter-configs DIR",
            "docker cp $(docker create IMG):/sgl-workspace/aiter/aiter/configs build/aiter-configs",
        )
    if aiter_commit is not None and aiter_configs is None:
        raise ConfigError(
            "--aiter-commit names the aiter of --aiter-configs DIR; with --base-image the "
            "image's own aiter says which commit it is",
            "drop --aiter-commit",
        )
    if aiter_configs is not None:
        from dataclasses import replace

        from sglforge.aiter_rules import rule_of_dir

        rule = rule_of_dir(aiter_configs, aiter_commit)
        base = replace(base_tables_from_dir(aiter_configs), aiter=rule)
    else:
        from sglforge.overlay_configs import base_aiter

        assert base_image is not None
        found = base_aiter(base_image)
        if found is None:
            raise ConfigError(f"image {base_image} has no aiter: no tuned tables to match")
        base = found
    project = st.project
    from sglforge.construct.environment import image_facts

    sc = project.scenario_named(scenario)
    result = coverage.for_scenario(
        project,
        project.target(sc.target) if sc.target else None,  # resolved here, once
        model_dir,
        sc,
        base,
        tree,
        gfx,
        base_env=image_facts(base_image) if base_image else None,
    )
    hot = result.hot_misses()
    if untuned is not None:
        from sglforge.util import atomic_write

        atomic_write(untuned, coverage.untuned_csv(result))
    if as_json:
        print_json(result.to_dict(), ok=not hot)
    else:
        rule = result.aiter
        click.echo(f"aiter {rule.commit or '(commit unknown)'}: {rule.source}")
        click.echo(f"  key {', '.join(rule.key)}; tokens {rule.buckets.describe()}")
        click.echo(f"aiter tables ({result.gfx}, cu_num {result.cu_num}), merged in this order:")
        for name in result.tables:
            click.echo(f"  {name}")
        for (model, shape), group in _by_shape(result.lookups).items():
            layers = group[0].layers
            where = layers[0] if len(layers) == 1 else f"{layers[0]} .. {layers[-1]}"
            click.echo(
                f"\n{model}: {len(layers)} layer(s) {where}: model_dim {shape.model_dim}, "
                f"inter_dim {shape.inter_dim}, expert {shape.expert}, topk {shape.topk}, "
                f"{shape.q_type}"
            )
            rows = [
                [
                    ",".join(map(str, x.tokens)),
                    "hit" if x.status != "miss" else "MISS",
                    x.file or "",
                ]
                for x in group
            ]
            click.echo(table(["tokens", "lookup", "answered by"], rows))
        for note in result.notes:
            click.echo(f"note: {note}")
        if result.environment is not None:
            click.echo(f"environment: {result.environment.describe()}")
        click.echo(
            f"\n{result.misses} lookup(s) miss"
            + (f", {sum(len(x.tokens) for x in hot)} on hot shapes" if hot else "")
        )
    if hot:
        raise SystemExit(EXIT_PROBLEMS)


def _by_shape(lookups: Iterable[Lookup]) -> dict[tuple[str, Shape], list[Lookup]]:
    out: dict[tuple[str, Shape], list[Lookup]] = {}
    for x in lookups:
        out.setdefault((x.model, x.shape), []).append(x)
    return out


@configs_group.command("tune")
@click.option(
    "--image", required=True, metavar="IMG", help="The image to tune in (on the GPU node)."
)
@click.option(
    "--model",
    "model_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The checkpoint folder (its config.json).",
)
@scenario_option(
    "Smoke scenario (NAME or file): the launch whose misses are tuned, and the container profile.",
    required=True,
)
@click.option("--name", required=True, help="Name of the config item to write (patches/configs/).")
@click.option(
    "--sglang",
    "tree",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A release's python/ folder (default: the pin's tree from `sglforge patches apply`).",
)
@click.option("--tuner-arg", "tuner_args", multiple=True, help="Extra argument for aiter's tuner.")
@json_option
@pass_state
def tune_cmd(
    st: State,
    image: str,
    model_dir: Path,
    scenario: str,
    name: str,
    tree: Path | None,
    tuner_args: tuple[str, ...],
    as_json: bool,
) -> None:
    """Tune the launch's missing aiter fused-MoE keys inside IMG and write a Pending item.

    Runs aiter's own tuner (csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py) in a container
    with the scenario's profile on exactly the keys `configs coverage` reports missing, and
    writes its rows, unchanged, as patches/configs/NAME.{csv,toml} stamped with the image
    digest, aiter's commit, gfx, cu_num and the tuner's arguments.

    \b
    Example (on the MI355X node):
      sglforge configs tune --image sglforge/sglang:v0.5.14-rocm700-mi355x-q1234abcd \\
          --model /data/GLM-5.2-MXFP4 --scenario smoke/glm5-mxfp4-mtp-mi355x.toml \\
          --name glm52-mxfp4-moe-gfx950-tp8
    """
    from sglforge.scenario.file import scenario_path
    from sglforge.tune import TuneRequest, tune

    chosen = scenario_path(st.root, scenario)
    req = TuneRequest(image, model_dir, chosen, name, tree=tree, tuner_args=tuner_args)
    out = tune(st.root, req, say=lambda m: click.echo(m, err=True))
    if as_json:
        print_json(
            {
                "item": out.name,
                "csv": out.csv_file,
                "toml": out.meta_file,
                "rows": out.rows,
                "asked": out.asked,
                "not_tuned": out.not_tuned,
                "work": out.work,
            },
            ok=out.not_tuned == 0,
        )
    else:
        click.echo(
            f"{out.meta_file}: {out.rows} tuned row(s) for {out.asked} missing key(s)"
            + (f", {out.not_tuned} not tuned" if out.not_tuned else "")
            + f" (tuner input, output and log in {out.work})"
        )
    if out.not_tuned:
        raise SystemExit(EXIT_PROBLEMS)
