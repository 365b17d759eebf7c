"""Cohorts in the catalog: each ClusterQueue's view carries the whole cohort tree its cohortName
belongs to (implicit Cohorts included), a cycle of parents is refused with Kueue's words, and a
change anywhere in a tree re-sends the view of every ClusterQueue of the trees it touches."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from admitflow.admission import catalog
from admitflow.admission.catalog import CatalogError, CatalogState, ObjectRef
from admitflow.admission.flavor_assignment import FlavorQuota, ResourceGroupQuota
from admitflow.api import load_manifests
from admitflow.kinds import kind_of
from admitflow.printing import COLUMNS, WIDE
from tests.builders import cluster_queue_manifest, flavor_manifest, manifest

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "kueue-examples"
V2 = "kueue.x-k8s.io/v1beta2"


def uids():
    n = iter(range(1, 1000))
    return lambda: f"uid-{next(n)}"


def cohort(name: str, parent: str | None = None, cpu: str | None = None, weight: str | None = None, **limits: Any) -> dict:
    """A Cohort; `cpu` gives it a pool of that much cpu in flavor `default`, with these limits."""
    spec: dict[str, Any] = {}
    if parent is not None:
        spec["parentName"] = parent
    if cpu is not None:
        quota = {"name": "cpu", "nominalQuota": cpu, **limits}
        spec["resourceGroups"] = [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [quota]}]}]
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return {"apiVersion": V2, "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def queue(name: str, cohort_name: str | None = None) -> dict:
    return cluster_queue_manifest(name, **({"cohortName": cohort_name} if cohort_name else {}))


def config(**fields: Any) -> dict:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **fields}


def applied(*docs: dict) -> CatalogState:
    st = CatalogState()
    catalog.apply(st, [manifest(d) for d in docs], uids(), T0)
    return st


def apply(st: CatalogState, *docs: dict) -> None:
    catalog.apply(st, [manifest(d) for d in docs], uids(), T0)


def tree(st: CatalogState, cq: str) -> tuple[str, dict[str, tuple[str | None, bool, float]]] | None:
    """(root, {cohort: (parent, explicit, weight)}) of a ClusterQueue's view, or None."""
    t = catalog.view_of(st, cq).cohort_tree
    if t is None:
        return None
    return t.root, {n: (c.parent, c.explicit, c.weight) for n, c in t.cohorts.items()}


def resent(st: CatalogState) -> list[str]:
    return [v.name for v in catalog.changed_views(st)]


# --- the tree in each view --------------------------------------------------------------------------


ROOT, IMPORTANT, REGULAR = cohort("root-cohort"), cohort("important-org", "root-cohort", weight="0.75"), cohort(
    "regular-org", "root-cohort", weight="0.25"
)


@pytest.mark.parametrize(
    ("docs", "cq", "want"),
    [
        pytest.param([queue("cq")], "cq", None, id="a-queue-without-a-cohort-has-no-tree"),
        pytest.param(
            [queue("cq", "team")],
            "cq",
            ("team", {"team": (None, False, 1.0)}),
            id="a-cohort-named-by-a-queue-but-never-created-is-an-implicit-root",
        ),
        pytest.param(
            [cohort("team", cpu="12"), queue("a", "team"), queue("b", "team")],
            "b",
            ("team", {"team": (None, True, 1.0)}),
            id="queues-of-a-flat-cohort-see-the-created-cohort",
        ),
        pytest.param(
            [ROOT, IMPORTANT, REGULAR, queue("cq", "important-org")],
            "cq",
            (
                "root-cohort",
                {
                    "important-org": ("root-cohort", True, 0.75),
                    "regular-org": ("root-cohort", True, 0.25),
                    "root-cohort": (None, True, 1.0),
                },
            ),
            id="a-hierarchy-lists-every-cohort-of-the-tree-even-those-without-queues",
        ),
        pytest.param(
            [cohort("child", "org"), queue("cq", "child")],
            "cq",
            ("org", {"child": ("org", True, 1.0), "org": (None, False, 1.0)}),
            id="a-parent-named-but-never-created-is-an-implicit-root",
        ),
        pytest.param(
            [cohort("a"), cohort("b"), queue("cq", "a"), queue("other", "b")],
            "cq",
            ("a", {"a": (None, True, 1.0)}),
            id="cohorts-of-another-tree-are-not-listed",
        ),
        pytest.param(
            [cohort("leaf", "mid"), cohort("mid", "top"), queue("cq", "top"), queue("deep", "leaf")],
            "cq",
            ("top", {"leaf": ("mid", True, 1.0), "mid": ("top", True, 1.0), "top": (None, False, 1.0)}),
            id="a-queue-at-the-root-sees-the-cohorts-below-it",
        ),
        pytest.param(
            [cohort("team", weight="0"), queue("cq")],
            "cq",
            None,
            id="a-queue-outside-every-cohort-sees-none-of-them",
        ),
    ],
)
def test_cohort_tree_of_a_cluster_queue(docs, cq, want):
    assert tree(applied(*docs), cq) == want


def test_a_cohorts_quota_and_limits_reach_the_tree_as_the_scheduler_counts_them():
    st = applied(cohort("org"), cohort("team", "org", cpu="1500m", borrowingLimit="1", lendingLimit="2"), queue("cq", "team"))
    team = catalog.view_of(st, "cq").cohort_tree.cohorts["team"]
    assert team.groups == (
        ResourceGroupQuota(
            covered=("cpu",),
            flavors=(FlavorQuota(name="default", nominal={"cpu": 1500}, borrowing_limit={"cpu": 1000}, lending_limit={"cpu": 2000}),),
        ),
    )


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_kueues_cohort_examples_give_the_trees_its_docs_describe(version):
    st = CatalogState()
    objects = [m.obj for m in load_manifests([str(EXAMPLES / version)])]
    catalog.apply(st, [o for o in objects if o.kind in catalog.CATALOG_KINDS], uids(), T0)
    assert tree(st, "my-cluster-queue") == ("hello-cohort", {"hello-cohort": (None, True, 1.0)})
    assert catalog.view_of(st, "my-cluster-queue").cohort_tree.cohorts["hello-cohort"].groups[0].flavors[0].nominal == {
        "cpu": 12000
    }
    assert {n: c.weight for n, c in catalog.cohort_tree(st, "regular-org").cohorts.items()} == {
        "important-org": 0.75,
        "regular-org": 0.25,
        "root-cohort": 1.0,
    }


def test_a_view_without_cohort_or_fair_sharing_is_sent_as_before():
    # Views are compared by digest; fields that are unset must not change those of queues that use
    # neither, or every queue would be re-sent once after an upgrade.
    st = applied(flavor_manifest(), queue("cq"))
    wire = catalog.view_of(st, "cq").to_wire()
    assert "cohortTree" not in wire and "fairSharing" not in wire


# --- changes re-send the views of every queue of the trees they touch -------------------------------


def test_a_change_to_a_cohort_resends_every_queue_of_its_tree_and_no_other():
    st = applied(ROOT, IMPORTANT, REGULAR, queue("a", "important-org"), queue("b", "regular-org"), queue("c", "root-cohort"))
    apply(st, cohort("elsewhere"), queue("alone", "elsewhere"), queue("plain"))
    catalog.changed_views(st)
    apply(st, cohort("regular-org", "root-cohort", weight="0.5"))
    assert resent(st) == ["a", "b", "c"]
    apply(st, cohort("regular-org", "root-cohort", weight="0.5"))
    assert resent(st) == [], "an unchanged Cohort re-sends nothing"


def test_a_cohort_moved_to_another_tree_resends_both_trees():
    st = applied(cohort("a"), cohort("b"), cohort("team", "a"), queue("in-a", "a"), queue("in-b", "b"), queue("in-team", "team"))
    catalog.changed_views(st)
    apply(st, cohort("team", "b"))
    assert resent(st) == ["in-a", "in-b", "in-team"]
    assert tree(st, "in-a") == ("a", {"a": (None, True, 1.0)})
    assert tree(st, "in-team") == ("b", {"b": (None, True, 1.0), "team": ("b", True, 1.0)})


def test_a_deleted_cohort_falls_back_to_an_implicit_one_of_the_same_name():
    st = applied(cohort("org"), cohort("team", "org", cpu="4", lendingLimit="1"), queue("cq", "team"), queue("sibling", "org"))
    catalog.changed_views(st)
    catalog.delete(st, [ObjectRef(kind="Cohort", key="team")], T0)
    assert resent(st) == ["cq", "sibling"], "the old tree loses the Cohort"
    assert tree(st, "cq") == ("team", {"team": (None, False, 1.0)}), "no parent and no quota any more, as in Kueue"
    assert catalog.view_of(st, "cq").cohort_tree.cohorts["team"].groups == ()
    assert tree(st, "sibling") == ("org", {"org": (None, True, 1.0)})


def test_a_deleted_parent_stays_the_root_while_a_child_names_it():
    st = applied(cohort("org", cpu="8"), cohort("team", "org"), queue("cq", "team"))
    catalog.delete(st, [ObjectRef(kind="Cohort", key="org")], T0)
    assert tree(st, "cq") == ("org", {"org": (None, False, 1.0), "team": ("org", True, 1.0)})


def test_a_queue_that_changes_cohort_gets_its_new_tree():
    st = applied(cohort("a", cpu="1"), cohort("b", cpu="2"), queue("cq", "a"))
    catalog.changed_views(st)
    apply(st, queue("cq", "b"))
    assert resent(st) == ["cq"]
    assert tree(st, "cq") == ("b", {"b": (None, True, 1.0)})


def test_fair_sharing_of_the_configuration_reaches_and_resends_every_view():
    st = applied(queue("a"), queue("b", "team"))
    assert catalog.view_of(st, "a").fair_sharing is None, "off without a Configuration"
    catalog.changed_views(st)
    apply(st, config(fairSharing={"preemptionStrategies": ["LessThanInitialShare"]}))
    assert resent(st) == ["a", "b"]
    assert catalog.view_of(st, "b").fair_sharing == ["LessThanInitialShare"]
    apply(st, config())
    assert resent(st) == ["a", "b"]
    assert catalog.view_of(st, "a").fair_sharing is None


# --- cycles -------------------------------------------------------------------------------------------


def cycle(name: str, parent: str, loop: str) -> str:
    return (
        f'Cohort "{name}" is invalid: spec.parentName: Invalid value: "{parent}": '
        f'Cohort "{name}" has a cycle in hierarchy ({loop})'
    )


@pytest.mark.parametrize(
    ("stored", "request_", "index", "message"),
    [
        pytest.param([], [cohort("a", "a")], 0, cycle("a", "a", "a -> a"), id="a-cohort-that-is-its-own-parent-is-refused"),
        pytest.param(
            [cohort("a", "b"), cohort("b")],
            [cohort("b", "a")],
            0,
            cycle("b", "a", "b -> a -> b"),
            id="closing-a-loop-over-stored-cohorts-is-refused",
        ),
        pytest.param(
            [],
            [flavor_manifest(), cohort("x", "y"), cohort("y", "x")],
            1,
            cycle("x", "y", "x -> y -> x"),
            id="two-cohorts-of-one-apply-naming-each-other-are-refused-at-the-first",
        ),
        pytest.param(
            [cohort("top"), cohort("mid", "top"), cohort("leaf", "mid")],
            [cohort("top", "leaf")],
            0,
            cycle("top", "leaf", "top -> leaf -> mid -> top"),
            id="moving-a-root-under-its-own-descendant-is-refused",
        ),
        pytest.param(
            [cohort("b", "c"), cohort("c", "b2"), cohort("b2")],
            [cohort("a", "b"), cohort("b2", "c")],
            1,
            cycle("b2", "c", "b2 -> c -> b2"),
            id="the-cohort-that-closes-the-loop-is-named-not-one-that-only-leads-into-it",
        ),
    ],
)
def test_a_cycle_of_parents_is_refused_with_kueues_words(stored, request_, index, message):
    st = applied(*stored)
    before = st.model_copy(deep=True)
    with pytest.raises(CatalogError) as err:
        catalog.apply(st, [manifest(d) for d in request_], uids(), T0)
    assert (str(err.value), err.value.index) == (message, index)
    assert "\n" not in str(err.value)
    assert st == before, "a refused apply applies nothing"


def test_the_validator_refuses_a_cycle_before_the_update_runs():
    st = applied(cohort("a", "b"))
    with pytest.raises(CatalogError, match='Cohort "b" has a cycle in hierarchy'):
        catalog.validate_apply(st, [manifest(cohort("b", "a"))])


def test_undoing_a_parent_link_and_relinking_the_other_way_is_accepted():
    st = applied(cohort("a", "b"), cohort("b"))
    apply(st, cohort("a"), cohort("b", "a"))
    assert catalog.cohort_tree(st, "b").root == "a"


# --- how a Cohort is named and printed ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["cohort", "cohorts", "Cohort", "cohorts.kueue.x-k8s.io", "cohort.v1beta2.kueue.x-k8s.io"])
def test_cohorts_are_named_as_kubectl_names_them(name):
    assert kind_of(name) == "Cohort"


def test_get_cohorts_shows_the_parent_and_wide_adds_flavors_and_weight():
    st = applied(cohort("team", "org", cpu="4", weight="0.5"))
    wire = st.get("Cohort", "team").to_wire()
    headers, row = COLUMNS["Cohort"]
    assert headers == ["NAME", "PARENT", "AGE"]
    assert row(wire)[:2] == ["team", "org"]
    wide_headers, wide_row = WIDE["Cohort"]
    assert (wide_headers, wide_row(wire)) == (["FLAVORS", "WEIGHT"], ["default", "0.5"])
