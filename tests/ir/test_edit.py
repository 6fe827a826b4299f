"""netlint.ir.edit: the transactional edit every fix pass writes through. An uncommitted edit leaves the graph as it
was and answers for the edited graph; commit places added nodes, prunes what was left unread, checks the
invariants (defined once, before the readers, outputs kept, unique names, no cycle) and keeps the indexes current."""

from __future__ import annotations

import numpy as np
import pytest

from netlint.ir import ConstData, Graph, Node, Value
from netlint.ir.edit import Edit, InvariantError, copy_node


def chain(count: int = 4) -> Graph:
    """v0 -> r0 -> v1 -> r1 -> ... -> v{count}, with a constant `w` read by r0 only."""
    nodes = [
        Node(f"r{i}", "Relu", [f"v{i}", *(["w"] if i == 0 else [])], [f"v{i + 1}"], origin=i) for i in range(count)
    ]
    values = {f"v{i}": Value(f"v{i}", "float32", (1, 4)) for i in range(count + 1)}
    values["w"] = Value("w", "float32", (4,), data=ConstData(lambda: np.ones(4, np.float32)))
    return Graph("g", nodes, values, ["v0"], [f"v{count}"])


def test_an_uncommitted_edit_answers_for_the_edited_graph_and_leaves_the_graph_alone() -> None:
    graph = chain()
    edit = Edit(graph)
    edit.rewire("v2", "v1")  # r2 reads r0's output: r1 is left unread
    edit.remove("r1")
    assert graph.node("r1") is not None and graph.consumers("v1") == [graph.node("r1")]
    assert edit.node("r1") is None and [n.id for n in edit.consumers("v1")] == ["r2"]
    assert edit.producer("v2") is None and edit.producer("v1") is graph.node("r0")
    changes = edit.changes()
    assert [n.id for n in changes.removed] == ["r1"] and [b.id for b, _ in changes.modified] == ["r2"]
    assert changes.dropped_values == ["v2"] and [n.id for n in graph.nodes] == ["r0", "r1", "r2", "r3"]


def test_commit_places_added_nodes_before_and_after_their_anchors_and_reindexes() -> None:
    graph = chain()
    edit = Edit(graph)
    edit.insert(Node("before", "Identity", ["v1"], ["b"]), before="r1")
    edit.insert(Node("after", "Identity", ["v2"], ["a"]), after="r1")
    edit.insert(Node("tail", "Identity", ["v4"], ["t"]))
    for name in ("b", "a", "t"):
        edit.activation(name, like="v1")  # unused names get numbered: these are taken by nothing yet
    edit.change("r2", inputs=["a"])
    changes = edit.commit()
    assert [n.id for n in graph.nodes] == ["r0", "before", "r1", "after", "r2", "r3", "tail"]
    assert {n.id for n in changes.added} == {"before", "after", "tail"}
    assert graph.producer("a").id == "after" and [n.id for n in graph.consumers("a")] == ["r2"]
    assert graph.node("r2").edited and graph.node("r2").origin == 2 and not graph.node("r3").edited


def test_commit_prunes_what_the_edit_left_unread_walking_back() -> None:
    """Removing r1 (r2 now reads v1) leaves nothing unread; removing r0's reader of `w` prunes the constant."""
    graph = chain()
    edit = Edit(graph)
    edit.change("r0", inputs=["v0"])  # r0 no longer reads w
    edit.rewire("v3", "v2")
    edit.remove("r2")
    changes = edit.commit()
    assert "w" not in graph.values and "w" in changes.dropped_values
    assert [n.id for n in graph.nodes] == ["r0", "r1", "r3"] and "v3" not in graph.values


def test_a_node_left_without_readers_is_pruned_but_graph_outputs_and_inputs_stay() -> None:
    graph = chain(2)
    extra = Node("side", "Sigmoid", ["v1"], ["s"])
    graph.nodes.insert(1, extra)
    graph.values["s"] = Value("s", "float32", (1, 4))
    graph.nodes.append(Node("reader", "Relu", ["s"], ["o"]))
    graph.values["o"] = Value("o", "float32", (1, 4))
    graph.outputs.append("o")
    graph.reindex()
    edit = Edit(graph)
    edit.change("reader", inputs=["v2"])  # `s` loses its reader: the Sigmoid goes
    edit.commit()
    assert graph.node("side") is None and "s" not in graph.values and graph.is_graph_output("o")


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (lambda e: e.remove("r1"), "reads 'v2', which nothing defines"),
        (lambda e: e.change("r2", outputs=["v2"]), "'v2' is defined twice"),
        (lambda e: e.remove("r3"), "graph output 'v4' is no longer produced"),
        (lambda e: e.change("r1", inputs=["nowhere"]), "reads 'nowhere', which nothing defines"),
    ],
)
def test_the_invariants_are_checked_and_the_graph_is_left_as_it_was(broken, message: str) -> None:
    graph = chain()
    before = list(graph.nodes)
    edit = Edit(graph)
    broken(edit)
    with pytest.raises(InvariantError, match=message):
        edit.commit()
    assert graph.nodes == before


def test_a_cycle_is_refused_and_a_misordered_edit_is_sorted() -> None:
    graph = chain()
    edit = Edit(graph)
    edit.change("r0", inputs=["v3"])  # r0 would read r2's output, which reads r0's
    with pytest.raises(InvariantError, match="cycle"):
        edit.commit()
    graph = chain()
    edit = Edit(graph)
    late = edit.insert(Node("late", "Identity", ["v0"], ["l"]))  # appended at the end ...
    edit.activation("l", like="v0")
    edit.change("r0", inputs=["l", "w"])  # ... but read by the first node: a stable topological sort
    edit.commit()
    assert [n.id for n in graph.nodes] == ["late", "r0", "r1", "r2", "r3"] and late in graph.nodes


def test_ids_and_names_are_unique_and_a_taken_id_is_refused() -> None:
    graph = chain()
    edit = Edit(graph)
    assert edit.unique_name("v1") == "v1_1" and edit.unique_name("v1") == "v1_2" and edit.unique_id("r0") == "r0_1"
    with pytest.raises(InvariantError, match="taken"):
        edit.insert(Node("r1", "Relu", ["v0"], ["x"]))


def test_new_constants_are_lazy_until_asked() -> None:
    graph = chain()
    edit = Edit(graph)
    calls: list[int] = []

    def load() -> np.ndarray:
        calls.append(1)
        return np.zeros(4, np.float32)

    name = edit.constant("bias", load, "float32", (4,))
    edit.change("r1", inputs=["v1", name])
    changes = edit.commit()
    assert calls == [] and graph.values[name].edited and graph.is_const(name)
    assert changes.new_values[name].data.array().shape == (4,) and calls == [1]


def test_nodes_are_never_changed_in_place() -> None:
    graph = chain()
    original = graph.node("r1")
    inputs = list(original.inputs)
    edit = Edit(graph)
    changed = edit.change("r1", attrs={"alpha": 0.1})
    assert original.inputs == inputs and original.attrs == {} and not original.edited
    assert changed is not original and changed.edited and changed.origin == original.origin
    twin = copy_node(original, id="twin")
    assert twin.edited and twin.origin == original.origin and twin.inputs == original.inputs
