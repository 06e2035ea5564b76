"""Seed parity: the three validation errors, the archive digest, prefix-mode verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexes import HashingEmbedder
from sidecar import ReportRejected, Sidecar, parse_report
from sidecar.archive.chains import archive_digest, digest_entry
from sidecar.errors import EmptyArchive
from tests.sidecar.helpers import abandoned
from tests.sidecar.seed_oracle import OracleChain, oracle_digest, oracle_prefix_check

SEED_CHAINS = [
    OracleChain(("search_api_v2", "html_parser", "llm_extractor"), "TIMEOUT_30S", "R1"),
    OracleChain(("search_api_v2", "pdf_reader"), "HTTP 413", "R2"),
    OracleChain(("geocoder", "route_planner", "sms_send"), "SCHEMA_MISMATCH", "R3"),
]
# The value the seed's own ToolChainArchiver.build_archive returns for SEED_CHAINS.
SEED_DIGEST = "4c9ef93778b9a847ae100e80452d2398b135be95e35e39c282220476df5c1ed9"


@pytest.mark.parametrize(
    ("report", "message"),
    [
        (abandoned(["only_one"]), "An abandoned chain must contain at least two tools."),
        (abandoned([]), "An abandoned chain must contain at least two tools."),
        (
            abandoned(["a", "b"], signature="   "),
            "A terminal falsification signature is mandatory to prove abandonment.",
        ),
        (
            abandoned(["a", "b"], rule=""),
            "A negative constraint rule is required to prevent prefix re-execution.",
        ),
    ],
)
def test_the_seeds_three_value_errors(report: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_report(report)
    assert isinstance(info.value, ReportRejected)
    assert str(info.value) == message


def test_digest_formula_matches_the_seed() -> None:
    entries = [digest_entry(c.topology, c.signature) for c in SEED_CHAINS]
    assert archive_digest(entries) == oracle_digest(SEED_CHAINS)
    assert archive_digest(reversed(entries)) == archive_digest(entries)  # order-free


def test_pinned_digest_of_a_known_archive() -> None:
    assert oracle_digest(SEED_CHAINS) == SEED_DIGEST


def test_sidecar_digest_over_the_parquet_archive(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        with pytest.raises(EmptyArchive, match="Cannot build an empty abandoned chain archive"):
            sc.digest()
        for c in SEED_CHAINS:
            result = sc.report(
                abandoned(c.topology, c.signature, rule=c.rule, kind="deterministic")
            )
            assert result.status == "archived"
        assert sc.digest().digest == SEED_DIGEST
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:  # survives reopening
        assert sc.digest().digest == SEED_DIGEST


def test_prefix_mode_through_the_library(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        for c in SEED_CHAINS:
            sc.report(abandoned(c.topology, c.signature, rule=c.rule, kind="deterministic"))
        for plan in (
            ["search_api_v2", "html_parser"],
            ["search_api_v2", "pdf_reader", "x"],
            ["search_api_v2"],
            ["geocoder", "route_planner"],
            ["route_planner", "geocoder"],
            [],
        ):
            result = sc.check(plan, mode="prefix")
            safe, reason = oracle_prefix_check(SEED_CHAINS, plan)
            assert result.safe == safe
            assert (result.collisions[0].reason if result.collisions else None) == reason
