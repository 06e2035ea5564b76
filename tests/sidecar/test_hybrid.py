"""The hybrid lookup (real Chroma): BM25 follows every write to the hot index and never
serves a tool the state says is cold or that a constraint withholds; the fusion is
deterministic; completed chains raise what came next; a lookup abstains when nothing
fits, and only then.

The hashing embedder ranks by shared hashed words, so a tool that only BM25 can find
is one whose words reach it through stemming or identifier splitting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexes import HashingEmbedder, MiniLMEmbedder
from sidecar import Sidecar, Tool
from sidecar.eviction.journal import Move
from sidecar.lookup.ranking import fuse, query_views, successors
from tests.sidecar.helpers import abandoned, completed
from tests.support.text import fullwidth

LEXICAL_ONLY = "Tell me about vehicles"
"""Reaches ``getVehicleBatteryLevel`` only through its split, stemmed name."""


def tool(tool_id: str, description: str = "") -> Tool:
    return Tool(tool_id, description or f"{tool_id.replace('_', ' ')} tool")


CATALOG = [
    tool("weather_current", "Current weather conditions for a city."),
    tool("email_send", "Send an email message to a recipient."),
    tool("currency_converter", "Convert an amount between two currencies."),
    tool("html_parser", "Parse an HTML page into text."),
    tool("llm_extractor", "Extract fields from text with a language model."),
    tool("search_api", "Search the web for pages."),
    tool("getVehicleBatteryLevel", "Reads a charge percentage."),
]


@pytest.fixture
def sc(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(
        embedder=HashingEmbedder(), home=tmp_path / "home", evict_min_chains=1
    ) as sidecar:
        sidecar.add_tools(CATALOG)
        yield sidecar


def ids(sc: Sidecar, query: str, k: int = 3, **kw: Any) -> list[str]:
    return [h.tool_id for h in sc.search(query, k=k, **kw).hits]


def test_bm25_finds_a_tool_by_its_split_name(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, hybrid=False) as plain:
        plain.add_tools(CATALOG)
        assert ids(plain, LEXICAL_ONLY, k=1) != ["getVehicleBatteryLevel"]
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as hybrid:
        assert ids(hybrid, LEXICAL_ONLY, k=1) == ["getVehicleBatteryLevel"]


def test_lexical_follows_add_and_sync(sc: Sidecar) -> None:
    assert "radarMapImages" not in ids(sc, "show me radar maps", k=7)
    sc.add_tools([tool("radarMapImages", "Pictures.")])
    assert ids(sc, "show me radar maps", k=1) == ["radarMapImages"]
    sc.sync_tools("upstream", [tool("hourlyForecastService", "Predictions.")])
    assert ids(sc, "hourly forecasts", k=1) == ["hourlyForecastService"]
    sc.sync_tools("upstream", [])  # gone from the source: gone from every ranking
    assert "hourlyForecastService" not in ids(sc, "hourly forecasts", k=8)


def test_an_evicted_tool_is_never_served_and_a_restored_one_is(sc: Sidecar) -> None:
    sc.report(abandoned(["getVehicleBatteryLevel", "email_send"], "HTTP 400"))
    assert [d.tool_id for d in sc.evict().evicted] == ["getVehicleBatteryLevel"]
    assert "getVehicleBatteryLevel" not in ids(sc, LEXICAL_ONLY, k=7)
    sc.restore("getVehicleBatteryLevel", "fixed")
    assert ids(sc, LEXICAL_ONLY, k=1) == ["getVehicleBatteryLevel"]


def test_a_tool_whose_move_began_is_never_served(sc: Sidecar) -> None:
    sc.journal.write_intents(
        [Move("m1", "getVehicleBatteryLevel", "intent", {"document": "", "metadata": {}}, ())]
    )
    hits = ids(sc, LEXICAL_ONLY, k=6)
    assert "getVehicleBatteryLevel" not in hits
    assert len(hits) == 6  # still a full page


def test_a_withheld_continuation_is_not_a_hit_and_is_listed(sc: Sidecar) -> None:
    sc.report(abandoned(["search_api", "getVehicleBatteryLevel"], "HTTP 400", rule="no"))
    result = sc.search(LEXICAL_ONLY, k=3, after=["search_api"])
    assert "getVehicleBatteryLevel" not in [h.tool_id for h in result.hits]
    assert [w.tool_id for w in result.withheld] == ["getVehicleBatteryLevel"]
    assert len(result.hits) == 3


def test_another_process_writes_are_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as owner:
        owner.add_tools(CATALOG)
        reader = Sidecar.open(embedder=HashingEmbedder(), home=home, read_only=True)
        try:
            assert ids(reader, "show me radar maps", k=1) != ["radarMapImages"]
            owner.add_tools([tool("radarMapImages", "Pictures.")])
            assert ids(reader, "show me radar maps", k=1) == ["radarMapImages"]
            owner.sync_tools("src", [tool("hourlyForecastService", "Predictions.")])
            assert ids(reader, "hourly forecasts", k=1) == ["hourlyForecastService"]
            owner.sync_tools("src", [])
            assert "hourlyForecastService" not in ids(reader, "hourly forecasts", k=9)
        finally:
            reader.close()


def test_the_fusion_is_deterministic() -> None:
    a, b = ["x", "y", "z"], ["z", "y", "w"]
    order = fuse([(a, 1.0), (b, 1.0)])
    assert order == fuse([(a, 1.0), (b, 1.0)]) == ["z", "y", "x", "w"]
    # equal fused scores: the tiebreak, then the id
    assert fuse([(["p"], 1.0), (["q"], 1.0)]) == ["p", "q"]
    assert fuse([(["p"], 1.0), (["q"], 1.0)], {"q": 0.9, "p": 0.1}) == ["q", "p"]
    assert fuse([(a, 0.0)]) == []


def test_the_lookup_is_deterministic(sc: Sidecar) -> None:
    first = sc.search("send the parsed page text by email", k=5)
    for _ in range(3):
        assert sc.search("send the parsed page text by email", k=5) == first


def test_query_views_are_the_sentences_else_the_whole() -> None:
    assert query_views("find flights") == ["find flights"]
    text = "Find flights to Rome. Then book a hotel near the station!"
    assert query_views(text) == ["Find flights to Rome.", "Then book a hotel near the station!"]
    # a fragment too short to stand alone is no view; one sentence left: the whole
    assert query_views("Hi. Find flights to Rome.") == ["Hi. Find flights to Rome."]
    assert query_views("短い。日本語の天気を調べて。明日の予定も。") == [
        "日本語の天気を調べて。",
        "明日の予定も。",
    ]
    many = " ".join(f"Sentence number {i} here." for i in range(10))
    views = query_views(many)
    assert len(views) == 8 and views[-1].startswith("Sentence number 7") and "9" in views[-1]


def test_completed_chains_raise_what_came_next(sc: Sidecar) -> None:
    query = "Now do the next step"
    before = ids(sc, query, k=7, after=["search_api"])
    for n in range(3):
        sc.report(
            {
                **completed(["search_api", "html_parser", "currency_converter"]),
                "session_id": f"s{n}",
            }
        )
    after = ids(sc, query, k=7, after=["search_api"])
    assert set(after[:2]) == {"html_parser", "currency_converter"}
    assert after.index("html_parser") < before.index("html_parser")
    # without a prefix, or with the ranking's weight at 0, nothing changes
    assert ids(sc, query, k=7) == ids(sc, query, k=7)


def test_a_fatal_continuation_is_withheld_whatever_the_chains_say(sc: Sidecar) -> None:
    # completed runs raise llm_extractor after search_api; on big payloads the same
    # continuation is fatal (a run that completed it says nothing about those)
    sc.report(completed(["search_api", "llm_extractor"]))
    too_big = [{"step": "search_api", "field": "payload_bytes", "op": ">", "value": 5_000_000}]
    sc.report(abandoned(["search_api", "llm_extractor"], "HTTP 413", rule="too big", when=too_big))
    result = sc.search(
        "Now do the next step", k=7, after=["search_api"], context={"payload_bytes": 7_000_000}
    )
    assert "llm_extractor" not in [h.tool_id for h in result.hits]
    assert "llm_extractor" in [w.tool_id for w in result.withheld]


def test_a_tool_only_the_chains_name_is_neither_a_hit_nor_withheld(sc: Sidecar) -> None:
    # reports name tools the index never held: the completed run raises them after
    # search_api, the abandoned one makes one of them a fatal continuation
    sc.report(completed(["search_api", "gamma_tool", "beta_tool"]))
    sc.report(abandoned(["search_api", "beta_tool"], "HTTP 413"))
    result = sc.search("search_api", k=20, after=["search_api"])  # past the catalog
    served = {h.tool_id for h in result.hits} | {w.tool_id for w in result.withheld}
    assert served <= {t.tool_id for t in CATALOG}, served


def test_successors_match_the_longest_tail_of_the_prefix() -> None:
    chains = [(("a", "b", "c"), 2), (("x", "b", "d"), 1), (("b", "e"), 1)]
    assert successors(chains, ["a", "b"]) == ["c"]  # only one chain has a, b
    assert successors(chains, ["q", "b"]) == ["c", "d", "e"]  # the tail b alone
    assert successors(chains, ["zzz"]) == []
    assert successors(chains, []) == []


def test_a_lookup_abstains_when_nothing_fits_and_only_then(sc: Sidecar) -> None:
    far = sc.search("zqx vorpal jabberwock", k=3)
    assert far.abstained and len(far.hits) == 3  # the best candidates, flagged
    near = sc.search("Current weather conditions for a city.", k=3)
    assert not near.abstained and near.hits[0].tool_id == "weather_current"
    assert far.to_dict()["abstained"] is True


def test_abstention_can_be_turned_off(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path, abstain_below=0) as sc:
        sc.add_tools(CATALOG)
        assert not sc.search("zqx vorpal jabberwock", k=3).abstained


def test_non_ascii_queries(tmp_path: Path) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools(
            [
                *CATALOG,
                tool("wetter_zuerich", "Aktuelle Wetterlage in Zürich und Genève."),
                tool("tianqi_chaxun", "查询城市的天气预报。"),
            ]
        )
        assert ids(sc, "Wetterlage Zürich", k=1) == ["wetter_zuerich"]
        assert ids(sc, "天气预报", k=1) == ["tianqi_chaxun"]
        assert ids(sc, f"{fullwidth('Wetterlage')} in Zürich?", k=1) == ["wetter_zuerich"]


def test_a_multi_part_request_finds_each_part_with_the_model(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    with Sidecar.open(embedder=minilm, home=tmp_path) as sc:
        sc.add_tools(CATALOG)
        query = "Convert 20 dollars into euros. Also tell me the current weather in Lisbon."
        hits = ids(sc, query, k=2)
        assert set(hits) == {"currency_converter", "weather_current"}
        assert not sc.search(query, k=2).abstained
        assert sc.search("Write me a sonnet about love and loss.", k=2).abstained


def test_the_retrieval_settings_parse_and_fail_loudly() -> None:
    from sidecar.errors import ConfigError
    from sidecar.settings import Settings

    s = Settings.load(
        env={
            "SIDECAR_HYBRID": "false",
            "SIDECAR_ABSTAIN_BELOW": "0.5",
            "SIDECAR_CHAIN_WEIGHT": "0",
        }
    )
    assert (s.hybrid, s.abstain_below, s.chain_weight) == (False, 0.5, 0.0)
    for name, value in (
        ("SIDECAR_HYBRID", "maybe"),
        ("SIDECAR_ABSTAIN_BELOW", "1.5"),
        ("SIDECAR_ABSTAIN_BELOW", "high"),
        ("SIDECAR_CHAIN_WEIGHT", "-1"),
    ):
        with pytest.raises(ConfigError, match="(?i)" + name.removeprefix("SIDECAR_")):
            Settings.load(env={name: value})


# ---- the fusion by spread, over a real index (sidecar.lookup.ranking.hybrid_ranked) -----------
def test_the_spread_fusion_is_deterministic_and_weighs_each_ranker_by_its_spread() -> None:
    from sidecar.lookup.ranking import Signal

    dense = Signal({"a": 0.50, "b": 0.52}, 1.0, spread=0.1)  # b ahead by 0.2 spreads
    lexical = Signal({"a": 9.0, "b": 0.0}, 1.0, spread=3.0)  # a ahead by 3 spreads
    assert fuse([dense, lexical]) == fuse([dense, lexical]) == ["a", "b"]
    assert fuse([dense, Signal(lexical.scores, 1.0, spread=100.0)]) == ["b", "a"]
    # equal fused scores: the tiebreak, then the id; a signal of weight 0 is no signal
    assert fuse([Signal({"q": 1.0, "p": 1.0})]) == ["p", "q"]
    assert fuse([Signal({"q": 1.0, "p": 1.0})], {"q": 0.2}) == ["q", "p"]
    assert fuse([Signal({"x": 1.0}, weight=0.0)]) == []
    # a ranking without scores fuses as reciprocal rank fusion does
    assert fuse([(["x", "y"], 1.0), (["y", "z"], 1.0)]) == ["y", "x", "z"]


def hybrid(sc: Sidecar, text: str, k: int = 3, **kw: Any) -> Any:
    from indexes import query_vectors
    from sidecar.lookup.ranking import hybrid_ranked

    views = query_vectors(sc.index.embedder, query_views(text))
    return hybrid_ranked(sc.index, views, text, k, kw.pop("excluded", ()), **kw)


def test_hybrid_ranked_finds_by_either_ranker_and_displaces_the_excluded(sc: Sidecar) -> None:
    found = hybrid(sc, LEXICAL_ONLY, k=1)
    assert [t for t, _ in found.hits] == ["getVehicleBatteryLevel"]  # through BM25
    assert hybrid(sc, LEXICAL_ONLY, k=1) == found
    held = hybrid(sc, LEXICAL_ONLY, k=3, excluded={"getVehicleBatteryLevel"})
    assert "getVehicleBatteryLevel" not in [t for t, _ in held.hits] and len(held.hits) == 3
    assert [t for t, _ in held.displaced] == ["getVehicleBatteryLevel"]
    # a hit's score is its cosine similarity, as a lookup reports it
    vector = sc.index.embed_query(LEXICAL_ONLY)
    assert dict(found.hits) == sc.index.similarities(vector, ["getVehicleBatteryLevel"])


def test_usage_raises_a_tool_in_the_hybrid_ranking_and_says_how_many_sessions(
    sc: Sidecar,
) -> None:
    from indexes import Evidence, UsageIndex

    query = "keep only the readable words"
    before = [t for t, _ in hybrid(sc, query, k=7).hits]
    usage = UsageIndex(sc.index.embedder.dim)
    for n, served in enumerate(["keep only the readable words", "keep the readable words"]):
        vector = sc.index.embed_query(served)
        usage.add(Evidence("html_parser", "agent", f"s{n}", vector, True))
    after = hybrid(sc, query, k=7, usage=usage)
    ranked = [t for t, _ in after.hits]
    assert ranked.index("html_parser") < before.index("html_parser")
    assert after.usage["html_parser"].sessions == 2 and after.usage["html_parser"].score > 0
    # an abandoned session on the same request takes the raise away
    usage.add(Evidence("html_parser", "agent", "s9", sc.index.embed_query(query), False))
    lowered = hybrid(sc, query, k=7, usage=usage).usage
    assert "html_parser" not in lowered or lowered["html_parser"].score <= 0


def test_parameter_descriptions_reach_bm25_and_not_the_embedding(tmp_path: Path) -> None:
    from sidecar.tools.records import embedding_text, lexical_text

    described = Tool(
        "reading_fetch",
        "Fetches a reading.",
        input_schema={"properties": {"station": {"description": "the anemometer to poll"}}},
    )
    assert "anemometer" not in embedding_text(described)
    assert "station: the anemometer to poll" in lexical_text(described)
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path) as sc:
        sc.add_tools([*CATALOG, described])
        assert [t for t, _ in hybrid(sc, "anemometer polling", k=1).hits] == ["reading_fetch"]
        sc.index.invalidate()  # read again from Chroma: the same text
        assert [t for t, _ in hybrid(sc, "anemometer polling", k=1).hits] == ["reading_fetch"]
