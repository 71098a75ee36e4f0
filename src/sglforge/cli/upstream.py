"""``sglforge upstream ...``: look at the upstream the queue is pinned on."""

from __future__ import annotations

import click

from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.options import upstream_option
from sglforge.urls import shown
from sglforge.util import plural


@main.group("upstream")
def upstream_group() -> None:
    """Look at upstream sglang: its release tags and where the pin sits."""


@upstream_group.command("tags")
@click.argument("spec", required=False, default=">=0")
@click.option("--pre", is_flag=True, help="Also pre-releases (rc, dev).")
@upstream_option
@json_option
@pass_state
def tags_cmd(st: State, spec: str, pre: bool, upstream: str | None, as_json: bool) -> None:
    """List upstream's release tags matching SPEC (PEP 440, default all), oldest first.

    The tag the pin names is marked; a version (0.5.15) also names its tag (v0.5.15) for
    every --ref and --to.

    \b
    Examples:
      sglforge upstream tags
      sglforge upstream tags '>=0.5.14' --upstream pypi:sglang
    """
    from sglforge.patches.check import select_tags
    from sglforge.queue.upstream import open_upstream

    pin = st.project.queue.pin
    up = open_upstream(st.root, pin, upstream)
    tags = select_tags(up, spec, pre=pre)
    if as_json:
        print_json({"upstream": shown(up.source), "pin": pin.ref, "spec": spec, "tags": tags})
        return
    click.echo(f"upstream {shown(up.source)}: {plural(len(tags), 'tag')} matching {spec}")
    click.echo(table(["tag", "pin"], [[t, "<- pin" if t == pin.ref else ""] for t in tags]))
