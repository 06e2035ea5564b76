"""Retrieval quality with the real all-MiniLM-L6-v2 model over a small, varied catalog."""

from __future__ import annotations

import pytest

from indexes import ID_KEY, ActiveIndex, IndexRecord, MiniLMEmbedder

CATALOG: dict[str, str] = {
    "weather.current": "Get the current weather conditions and temperature for a city",
    "weather.forecast": "Get a multi-day weather forecast with rain probability for a location",
    "finance.stock_quote": "Look up the latest stock price for a ticker symbol",
    "finance.currency_convert": "Convert an amount of money from one currency to another",
    "mail.send": "Send an email message to a recipient with a subject and body",
    "mail.search_inbox": "Search the email inbox for messages matching a query",
    "calendar.create_event": "Create a calendar event or meeting at a given date and time",
    "maps.directions": "Compute driving or walking directions and a route between two places",
    "maps.geocode": "Convert a street address into latitude and longitude coordinates",
    "travel.book_flight": "Search and book airline flights between airports",
    "travel.book_hotel": "Find and reserve a hotel room for given check-in and check-out dates",
    "lang.translate": "Translate text from one language to another",
    "text.summarize": "Summarize a long document into a few sentences",
    "image.resize": "Resize, crop or rotate an image file",
    "files.compress": "Compress files and folders into a zip archive",
    "db.sql_query": "Run a SQL query against a relational database and return rows",
    "code.run_python": "Execute a Python code snippet in a sandbox and return its output",
    "web.search": "Search the web and return a list of result links",
    "web.fetch_page": "Download the HTML content of a web page from a URL",
    "music.play": "Play a song or playlist on the music streaming service",
    "food.order": "Order food delivery from a nearby restaurant",
    "health.step_count": "Read the daily step count and heart rate from a fitness tracker",
    "home.thermostat": "Set the target temperature of the smart home thermostat",
    "math.calculator": "Evaluate an arithmetic expression such as 12 * (3 + 4)",
    "news.headlines": "Get the latest news headlines on a topic",
    "sms.send": "Send a text message (SMS) to a phone number",
}

QUERIES = [
    ("what's the temperature outside in London right now", "weather.current"),
    ("will it rain in Tokyo next week", "weather.forecast"),
    ("how much is a share of Tesla worth today", "finance.stock_quote"),
    ("how many yen do I get for 100 euros", "finance.currency_convert"),
    ("compose an email to the landlord", "mail.send"),
    ("find the message from Alice about the invoice in my mailbox", "mail.search_inbox"),
    ("schedule a meeting with the team on Friday at 3pm", "calendar.create_event"),
    ("best route to drive from Berlin to Munich", "maps.directions"),
    ("what are the GPS coordinates of 10 Downing Street", "maps.geocode"),
    ("I need a plane ticket from Paris to New York", "travel.book_flight"),
    ("reserve a place to stay in Rome for two nights", "travel.book_hotel"),
    ("how do you say good morning in German", "lang.translate"),
    ("give me a short overview of this long report", "text.summarize"),
    ("make this photo smaller", "image.resize"),
    ("put these documents into a zip file", "files.compress"),
    ("select all customers from the orders table", "db.sql_query"),
    ("execute this python script and show me the result", "code.run_python"),
    ("open the page at https://example.com and get its html", "web.fetch_page"),
    ("put on some jazz music", "music.play"),
    ("I'm hungry, get me a pizza delivered", "food.order"),
    ("how many steps have I taken today", "health.step_count"),
    ("turn the heating up to 21 degrees", "home.thermostat"),
    ("calculate 17 multiplied by 23", "math.calculator"),
    ("what is happening in the world today, top stories", "news.headlines"),
    ("text my mom that I will be late", "sms.send"),
]


@pytest.fixture(scope="module")
def catalog_index(tmp_path_factory: pytest.TempPathFactory, minilm: MiniLMEmbedder) -> ActiveIndex:
    index = ActiveIndex.persistent(tmp_path_factory.mktemp("semantic") / "chroma", minilm)
    records = [IndexRecord(tid, desc, {"kind": tid.split(".")[0]}) for tid, desc in CATALOG.items()]
    assert index.upsert(records) == len(CATALOG)
    return index


def test_catalog_is_large_and_fully_indexed(catalog_index: ActiveIndex) -> None:
    assert len(CATALOG) >= 20
    assert catalog_index.count() == len(CATALOG)
    assert {r.id for r in catalog_index.scan(page_size=7)} == set(CATALOG)
    assert {tid for _, tid in QUERIES} <= set(CATALOG)


@pytest.mark.parametrize(("query", "expected"), QUERIES, ids=[tid for _, tid in QUERIES])
def test_query_finds_the_right_tool_at_rank_one(
    catalog_index: ActiveIndex, query: str, expected: str
) -> None:
    hits = catalog_index.search(query, 3)
    assert hits[0].id == expected, [(h.id, round(h.score, 3)) for h in hits]
    assert hits[0].document == CATALOG[expected]
    assert hits[0].metadata[ID_KEY] == expected
    assert hits[0].score > hits[1].score


def test_exact_description_scores_one(catalog_index: ActiveIndex) -> None:
    for tid in ("maps.geocode", "music.play", "db.sql_query"):
        top = catalog_index.search(CATALOG[tid], 1)[0]
        assert top.id == tid
        assert top.score == pytest.approx(1.0, abs=1e-4)


def test_scores_match_the_models_cosine(catalog_index: ActiveIndex, minilm: MiniLMEmbedder) -> None:
    query = "what's the temperature outside in London right now"
    hits = catalog_index.search(query, 5)
    vectors = minilm.embed([query, *(h.document for h in hits)])
    for hit, vec in zip(hits, vectors[1:], strict=True):
        assert hit.score == pytest.approx(float(vectors[0] @ vec), abs=1e-4)


def test_exclude_hands_the_top_slot_to_the_runner_up(catalog_index: ActiveIndex) -> None:
    query = "will it rain in Tokyo next week"
    full = catalog_index.search(query, 4)
    assert full[0].id == "weather.forecast"
    hits, displaced = catalog_index.search_ranked(query, 3, exclude={"weather.forecast"})
    assert [h.id for h in hits] == [h.id for h in full[1:4]]
    assert [h.id for h in displaced] == ["weather.forecast"]
    assert displaced[0].score == pytest.approx(full[0].score, abs=1e-6)


def test_precomputed_query_vector(catalog_index: ActiveIndex, minilm: MiniLMEmbedder) -> None:
    query = "put on some jazz music"
    vector = catalog_index.embed_query(query)
    assert vector.shape == (384,)
    by_vector = catalog_index.search(vector, 5)
    by_text = catalog_index.search(query, 5)
    assert [h.id for h in by_vector] == [h.id for h in by_text]
    assert by_vector[0].id == "music.play"
