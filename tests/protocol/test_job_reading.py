"""What elb-gate reads off a Job body: quantities, pod requests, placement, databases."""

from __future__ import annotations

from typing import Any

import pytest

from elbgate import quantity
from elbgate.databases import db_key, job_databases
from elbgate.pod_template import env_values, node_selector, pod_requests
from testbed import elastic_blast as elb


@pytest.mark.parametrize(
    ("raw", "milli"),
    [("6", 6000), ("15740m", 15740), ("0.5", 500), (4, 4000), ("1e1", 10000), ("250u", 1)],
)
def test_cpu_quantities_in_millicores(raw: object, milli: int) -> None:
    assert quantity.millicores(raw) == milli


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        ("4Gi", 4 * 2**30),
        ("4G", 4 * 10**9),
        ("251.7G", 251_700_000_000),
        ("126Gi", 126 * 2**30),
        ("128974848", 128974848),
        ("129e6", 129_000_000),
        ("1.5Ki", 1536),
    ],
)
def test_memory_quantities_in_bytes(raw: object, size: int) -> None:
    assert quantity.bytes_of(raw) == size


@pytest.mark.parametrize("raw", ["", "Gi", "4 Gi", "4GB", "lots", None, True, "1..2"])
def test_what_is_not_a_quantity_is_refused(raw: object) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse(raw)


def test_quantities_are_shown_the_way_kubectl_shows_them() -> None:
    assert quantity.cpu_text(6000) == "6"
    assert quantity.cpu_text(15740) == "15740m"
    assert quantity.memory_text(int(120.75 * 2**30)) == "120.7Gi"
    assert quantity.memory_text(int(120.75 * 2**30), round_up=True) == "120.8Gi"
    assert quantity.memory_text(4 * 2**30) == "4Gi"


def test_a_batch_job_asks_for_num_cpus_minus_two_and_its_memory_request() -> None:
    body = elb.blast_batch("s", 0, num_cpus=8, mem_request="4G")
    requests = pod_requests(body)
    assert (requests.cpu_milli, requests.memory_bytes) == (6000, 4 * 10**9)


def test_the_effective_request_is_the_larger_of_the_containers_sum_and_one_init_container() -> None:
    body: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {"name": "big-init", "resources": {"requests": {"cpu": "10"}}},
                        {
                            "name": "sidecar",
                            "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "1"}},
                        },
                    ],
                    "containers": [
                        {"name": "a", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                        {"name": "b", "resources": {"limits": {"cpu": "3", "memory": "2Gi"}}},
                    ],
                }
            }
        }
    }
    requests = pod_requests(body)
    assert requests.cpu_milli == 10000  # init 10 > 2 + 3 + sidecar 1
    assert requests.memory_bytes == 3 * 2**30  # a missing request defaults to the limit


def test_a_job_without_requests_asks_for_nothing() -> None:
    assert pod_requests(elb.finalizer("s")).empty
    assert pod_requests({"spec": "garbage"}).empty


def test_env_and_node_selector_are_read_from_the_pod_template() -> None:
    body = elb.init_ssd("s", 4, "core_nt")
    assert env_values(body, "ELB_DB") == ("core_nt",)
    assert env_values(body, "ELB_DB_PATH") == ()  # empty values are absent
    assert node_selector(body) == {"ordinal": "4"}


@pytest.mark.parametrize(
    ("body", "stages", "uses"),
    [
        pytest.param(
            elb.init_ssd("s", 0, "core_nt"), ("core_nt",), ("core_nt",), id="init-ssd stages ELB_DB"
        ),
        pytest.param(
            elb.init_pv("s", "swissprot"),
            ("swissprot",),
            ("swissprot",),
            id="init-pv stages ELB_DB",
        ),
        pytest.param(
            elb.init_ssd_shard("s", 3, "core_nt_shard_"),
            ("core_nt_shard_03",),
            ("core_nt_shard_03",),
            id="a sharded init stages its node's shard",
        ),
        pytest.param(
            elb.init_pv_partitioned("s", "core_nt_part_"),
            ("core_nt_part",),
            ("core_nt_part",),
            id="the partitioned init stages its partition prefix",
        ),
        pytest.param(elb.import_queries(), (), (), id="import-queries stages nothing"),
        pytest.param(elb.cloud_split(), (), (), id="the cloud split stages nothing"),
        pytest.param(
            elb.blast_batch("s", 0, "core_nt"), (), ("core_nt",), id="a batch Job uses its db"
        ),
        pytest.param(elb.submit_jobs("s"), (), (), id="the submit Job names no database"),
        pytest.param(elb.finalizer("s"), (), (), id="the finalizer names no database"),
    ],
)
def test_the_databases_a_job_stages_and_uses(
    body: dict[str, Any], stages: tuple[str, ...], uses: tuple[str, ...]
) -> None:
    dbs = job_databases(body)
    assert (dbs.stages, dbs.uses) == (stages, uses)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("core_nt", "core_nt"),
        (" core_nt ", "core_nt"),
        ("https://x.blob/db/core_nt", "core_nt"),
        ("a/b/", "b"),
        ("", ""),
    ],
)
def test_database_names_compare_without_their_path(raw: str, key: str) -> None:
    assert db_key(raw) == key
