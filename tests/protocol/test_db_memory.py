"""What one Job of a search needs from the operator's database memory table (003 §9.3, §9.4)."""

from __future__ import annotations

import pytest

from elbgate.db_memory import DbMemoryTable, memory_need, prefix_base
from testbed import elastic_blast as elb

CORE_NT = 251_700_000_000
TABLE = DbMemoryTable.from_data({"core_nt": "251.7G", "swissprot": "1Gi"})
S1 = elb.search_id(1)


def test_the_table_reads_quantities_and_names_databases_as_jobs_do() -> None:
    table = DbMemoryTable.from_data({"core_nt": " 251.7G ", "https://x/db/nr/": "400Gi"})
    assert table.needs == {"core_nt": CORE_NT, "nr": 400 * 2**30}
    assert table.problems == ()


def test_entries_that_are_not_memory_quantities_are_reported_and_skipped() -> None:
    table = DbMemoryTable.from_data({"core_nt": "251.7 GB", "nt": "0", "16S": "2Gi"})
    assert table.needs == {"16S": 2 * 2**30}
    assert [p.split(":")[0] for p in table.problems] == ["core_nt", "nt"]
    assert "e.g. 251.7G" in table.problems[0]


@pytest.mark.parametrize(
    "job",
    [
        elb.init_ssd(S1, 0, "core_nt"),
        elb.init_pv(S1, "core_nt"),
        elb.blast_batch(S1, 0, "core_nt"),
    ],
    ids=["init-ssd", "init-pv", "warm batch"],
)
def test_an_unpartitioned_search_needs_the_whole_database_on_one_node(job: dict) -> None:
    need = memory_need(job, TABLE, pool_nodes=10)
    assert need is not None and (need.db, need.per_node, need.parts) == ("core_nt", CORE_NT, 1)
    assert need.text == "database core_nt needs 251.7G (234.5Gi) of memory on one node"


@pytest.mark.parametrize(
    "prefix",
    ["https://elbstorage.blob.core.windows.net/db/core_nt_part_", "https://e/db/core_nt/part_"],
)
def test_a_partitioned_init_needs_one_partition_per_node(prefix: str) -> None:
    job = elb.init_pv_partitioned(S1)
    env = job["spec"]["template"]["spec"]["initContainers"][0]["env"]
    next(e for e in env if e["name"] == "ELB_PARTITION_PREFIX")["value"] = prefix
    need = memory_need(job, TABLE, pool_nodes=3)
    assert need is not None and (need.db, need.parts, need.per_node) == (
        "core_nt",
        10,
        25_170_000_000,
    )
    assert need.parts_from == "ELB_NUM_PARTITIONS=10"
    assert need.text == (
        "one part of database core_nt (251.7G (234.5Gi) in 10 parts: ELB_NUM_PARTITIONS=10) "
        "needs 23.5Gi of memory on one node"
    )


def test_a_shard_needs_its_share_of_the_pool_one_shard_per_node() -> None:
    need = memory_need(elb.init_ssd_shard(S1, 3), TABLE, pool_nodes=10)
    assert need is not None and (need.parts, need.per_node) == (10, 25_170_000_000)
    assert need.parts_from == "one shard per node on 10 nodes"
    batch = elb.blast_batch(S1, 3, "core_nt_shard_03", shard=3)
    assert memory_need(batch, TABLE, pool_nodes=10) == need


def test_a_shard_the_operator_lists_by_name_needs_what_is_listed() -> None:
    table = DbMemoryTable.from_data({"core_nt": "251.7G", "core_nt_shard_03": "30G"})
    need = memory_need(elb.init_ssd_shard(S1, 3), table, pool_nodes=10)
    assert need is not None and (need.db, need.per_node, need.parts) == (
        "core_nt_shard_03",
        30 * 10**9,
        1,
    )


def test_a_part_whose_number_of_parts_is_unknown_is_not_judged_by_the_whole() -> None:
    assert memory_need(elb.init_ssd_shard(S1, 3), TABLE, pool_nodes=0) is None
    batch = elb.blast_batch(S1, 0, "part00")  # a partitioned batch Job: ELB_DB part_00/…
    env = batch["spec"]["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "ELB_DB")["value"] = "part_00/core_nt_part_00"
    assert memory_need(batch, TABLE, pool_nodes=3) is None


def test_jobs_naming_no_listed_database_need_nothing_from_the_table() -> None:
    assert memory_need(elb.init_ssd(S1, 0, "16S_ribosomal_RNA"), TABLE, 3) is None
    assert memory_need(elb.submit_jobs(S1), TABLE, 3) is None
    assert memory_need(elb.init_ssd(S1, 0, "core_nt"), DbMemoryTable({}), 3) is None


def test_the_larger_need_of_the_databases_a_job_names_wins() -> None:
    job = elb.blast_batch(S1, 0, "swissprot")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "ELB_DB", "value": "core_nt"})
    need = memory_need(job, TABLE, 3)
    assert need is not None and need.db == "core_nt"


@pytest.mark.parametrize(
    ("prefix", "base"),
    [
        ("https://a/db/core_nt_part_", "core_nt"),
        ("https://a/db/core_nt/part_", "core_nt"),
        ("https://a/blast-db/10shards/core_nt_shard_", "core_nt"),
        ("https://a/db/nr-partitions-", "nr"),
        ("part_", ""),
    ],
)
def test_a_partition_prefix_names_the_database_it_splits(prefix: str, base: str) -> None:
    assert prefix_base(prefix) == base
