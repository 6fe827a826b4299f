"""NL100 unused-suppression."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from netlint.ir import Graph
from netlint.rule import Context, Finding, Rule, register
from netlint.suppression import printable

if TYPE_CHECKING:
    from netlint.suppression import Item, Suppression

SHOWN = 5  # items named in a message before "and N more"


@register
class UnusedSuppression(Rule):
    """A `netlint: ignore` marker or a `per-node-ignores` entry that suppresses no finding.

    ## What it does
    After every other rule has run on a model, checks each suppression that applies to it:

    - **markers** in the ONNX model (`netlint: ignore[CODE, ...]` in a node's `doc_string` or `metadata_props`, or
      in the model's `metadata_props`): every item that suppressed no finding is reported, if it names a rule that
      ran (an item for a rule outside the selection is not unused: nothing looked), or if it names no rule at all
      (a typo such as `FU01` or `prelu-as-rleu`). A bare `netlint: ignore` that suppressed nothing is reported, and
      so is a malformed marker (`ignore[FU001` without its `]`, or `ignore[]`), which suppresses nothing.
    - **`per-node-ignores` entries** of the configuration: an entry whose glob matches nodes of the model, none of
      whose selected rules had a finding there to suppress. An entry whose glob matches no node of the model is not
      reported for that model, because one configuration usually serves several models.
    - **comments in the model's code** (`# netlint: ignore[CODE, ...]` on a line of a Python file of the
      repository, which suppresses the findings whose node that line created, in every export; see README,
      "Findings in your model's code"): the markers of each file the run's findings point into, once per run,
      with the first model whose findings point into the file. A file no finding points into is not read: its
      markers may be meant for models the run did not check.

    One finding per marker or entry, anchored at the marker's node (the graph's name for a model-level marker) or
    at the first node the entry's glob matches; a comment's finding has no node and its source is the comment's
    line (SARIF and GitHub annotations point there). An item naming only NL100 is never reported by NL100 itself.

    ## Why is this bad?
    A suppression outlives the finding it was written for: the model is re-exported, the fix lands, the rule gets
    smarter, and the marker stays, silently hiding the next real finding of that rule at that node. A suppression
    that names no rule never worked, and whoever wrote it believes a finding is handled when it is not.

    ## Example
    ```
    node 'conv1' doc_string: "netlint: ignore[FU006]"      (its batchnorm was folded long ago)
    model.onnx:conv1: NL100 [warning] doc_string of Conv 'conv1': 'netlint: ignore[FU006]' is unused:
      FU006 has no finding here
    ```

    ## Fix
    By hand: delete the item (or the whole marker) from the node's doc_string or metadata_props, from the comment,
    or the entry from `per-node-ignores`, and correct misspelled codes. netlint never edits doc strings or code.

    ## Targets
    Every target, the same: a warning. What a marker suppresses depends on the rules that ran, so a marker may be
    used on one target and unused on another; markers for rules a target does not select are not reported.

    ## References
    - ruff, unused-noqa (RUF100), the rule this one follows: https://docs.astral.sh/ruff/rules/unused-noqa/ (ruff
      also reports codes of rules that are not enabled; netlint does not, because its selection changes with
      the target and with `--select` in pre-commit and CI jobs)
    - ruff's implementation of it, crates/ruff_linter/src/checkers/noqa.rs
    - ONNX IR: `doc_string` and `metadata_props` of NodeProto and ModelProto:
      https://onnx.ai/onnx/repo-docs/IR.html
    """

    code = "NL100"
    name = "unused-suppression"
    category = "hygiene"
    severity = "warning"

    def scan(self, graph: Graph, ctx: Context) -> Iterator[Finding]:
        """Nothing per graph: the engine calls `unused` after every rule ran (netlint.suppression.suppress)."""
        return iter(())

    @classmethod
    def unused(cls, suppression: Suppression, items: list[Item], anchor: str) -> Finding:
        """The finding for a suppression with `items` that suppressed nothing (or a malformed one)."""
        if suppression.problem is not None:
            message = f"{suppression.where}: marker '{suppression.text}' suppresses nothing: {suppression.problem}"
            help = "write it as `netlint: ignore[CODE, ...]` with codes, prefixes or rule names, or remove it"
        elif suppression.glob is not None:
            codes = suppression.items[0].text
            message = (
                f"{suppression.where} ({codes}) suppresses nothing: no finding of those rules at the nodes its "
                f"glob matches"
            )
            help = "remove the entry from per-node-ignores"
        elif suppression.blanket:
            message = f"{suppression.where}: '{suppression.text}' suppresses nothing: no rule has a finding here"
            help = "remove the marker"
        else:
            unknown = [item.text for item in items if item.codes is None]
            idle = [item.text for item in items if item.codes is not None]
            parts = []
            if idle:
                parts.append(f"{_names(idle)} {'has' if len(idle) == 1 else 'have'} no finding here")
            if unknown:
                parts.append(
                    f"{_names(unknown)} {'is' if len(unknown) == 1 else 'are'} not a rule code, prefix or name"
                )
            message = f"{suppression.where}: '{suppression.text}' is unused: " + "; ".join(parts)
            help = "remove these items from the marker (the whole marker if nothing is left)"
        return Finding(cls.code, cls.name, cls.severity, message, [anchor], [], None, help)


def _names(items: list[str]) -> str:
    shown = ", ".join(printable(item, 20) for item in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")
