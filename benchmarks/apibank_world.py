"""The refusals of the ``apibank`` domain: a small simulation, written for this
benchmark, of the checks API-Bank's tools make before they act, with API-Bank's own
messages (its ``data/exceptions.json``).  No code of API-Bank runs or is copied here.

Each mutation kind changes one ground-truth call, or inserts one, so that the service
refuses it; every other call keeps its recorded output, and the run ends at the refusal:

- ``invented_token``: an account tool gets a token of the same shape that no account
  holds (``The token is invalid.``; ``QueryBalance``: ``The token is incorrect.``);
- ``wrong_password``: ``GetUserToken`` with a password that is not the account's, or
  ``ModifyPassword`` with a wrong old one;
- ``unknown_user``: ``GetUserToken`` or the first ``ForgotPassword`` call with a
  username no account has (the user's name written another way);
- ``missing_object``: a query, change, deletion or cancellation of an alarm,
  reminder, agenda item, meeting, appointment, scene, stock, symptom, date, device or
  health record that does not exist (another time, date, id or name of the same shape);
- ``repeated_creation``: ``AppointmentRegistration`` or ``RegisterUser`` sent again
  right after it succeeded (the appointment, the username exists now);
- ``after_account_deleted``: after ``DeleteAccount``, the same deletion again or the
  user's ``GetUserToken`` (the account is gone);
- ``stale_password``: after ``ModifyPassword``, ``GetUserToken`` with the old password;
- ``reversed_range``: ``QueryHealthData`` with the start and end times swapped;
- ``skipped_step``: ``ForgotPassword``'s second call (``Verification Code``) without
  the first.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from benchmarks.mutation_runs import Mutation
from sidecar.memory import Step

KINDS = (
    "invented_token",
    "wrong_password",
    "unknown_user",
    "missing_object",
    "repeated_creation",
    "after_account_deleted",
    "stale_password",
    "reversed_range",
    "skipped_step",
)
INVALID_TOKEN = "The token is invalid."
TOKEN_TOOLS = frozenset(
    [
        "AddAgenda",
        "AddAlarm",
        "AddMeeting",
        "AddReminder",
        "DeleteAccount",
        "DeleteAgenda",
        "DeleteAlarm",
        "DeleteMeeting",
        "DeleteReminder",
        "ModifyAgenda",
        "ModifyAlarm",
        "ModifyMeeting",
        "ModifyReminder",
        "ModifyPassword",
        "QueryAgenda",
        "QueryAlarm",
        "QueryBalance",
        "QueryMeeting",
        "QueryReminder",
    ]
)
TIME = "%Y-%m-%d %H:%M:%S"
OTHER_SYMPTOMS = ("earache", "hiccups", "blurred vision", "toothache", "sore throat", "itching")
OTHER_SCENES = ("Evening Walk", "Party Mode", "Reading Time", "Guest Arrival", "Workout")
OTHER_TOPICS = ("Budget Review", "Quarterly Planning", "Client Call", "Design Review")
OTHER_CONTENTS = ("Water the plants", "Pay the rent", "Call the bank", "Book a haircut")


@dataclass(frozen=True)
class Dialogue:
    dialogue_id: str
    steps: tuple[Step, ...]
    """The ground-truth calls with their recorded outputs."""
    told: tuple[str, ...]
    """The user's turns before each call."""


def candidates(dialogue: Dialogue, world: Mapping[str, Any], seed: int) -> list[Mutation]:
    """Every mutation the dialogue admits, parameters drawn from a seeded generator."""
    rng = random.Random(f"apibank:{seed}:{dialogue.dialogue_id}:values")
    out: list[Mutation] = []
    for i, step in enumerate(dialogue.steps):
        state = _State(world, dialogue.steps[:i])
        for kind, changed, error in _changes(step, state, rng):
            failing = Step(step.tool, changed, None, error)
            steps = (*dialogue.steps[:i], failing)
            out.append(Mutation(kind, i, steps, dialogue.told[: i + 1]))
        skipped = _skipped_step(dialogue, i)
        if skipped is not None:
            out.append(skipped)
        after = _State(world, dialogue.steps[: i + 1])
        for kind, inserted in _insertions(step, after, rng):
            steps = (*dialogue.steps[: i + 1], inserted)
            out.append(Mutation(kind, i + 1, steps, (*dialogue.told[: i + 1], dialogue.told[i])))
    return out


def _skipped_step(dialogue: Dialogue, i: int) -> Mutation | None:
    """``ForgotPassword``'s second call with its first call left out before it."""
    step = dialogue.steps[i]
    if step.tool != "ForgotPassword" or step.arguments.get("status") != "Verification Code":
        return None
    keep = [
        j
        for j, s in enumerate(dialogue.steps[:i])
        if not (s.tool == "ForgotPassword" and s.arguments.get("status") == "Forgot Password")
    ]
    if len(keep) == i:
        return None
    error = "You need to call the API with status 'Forgot Password' at first."
    steps = (*(dialogue.steps[j] for j in keep), Step(step.tool, dict(step.arguments), None, error))
    return Mutation("skipped_step", len(keep), steps, (*(dialogue.told[j] for j in keep),
                                                      dialogue.told[i]))  # fmt: skip


class _State:
    """What the service holds before a call: the initial accounts, and what the
    dialogue's earlier calls registered, changed or deleted."""

    def __init__(self, world: Mapping[str, Any], before: tuple[Step, ...]) -> None:
        self.world = world
        self.accounts = {u: dict(a) for u, a in world["accounts"].items()}
        self.tokens_seen: set[str] = set()
        for step in before:
            args, out = step.arguments, step.output
            if step.tool == "RegisterUser" and isinstance(out, Mapping):
                self.accounts[str(args.get("username"))] = {
                    "password": args.get("password"), "token": out.get("token")}  # fmt: skip
            if step.tool == "ModifyPassword":
                user = self.user_of(str(args.get("token")))
                if user:
                    self.accounts[user]["password"] = args.get("new_password")
            if step.tool == "DeleteAccount":
                user = self.user_of(str(args.get("token")))
                if user:
                    del self.accounts[user]
            if isinstance(out, Mapping) and isinstance(out.get("token"), str):
                self.tokens_seen.add(out["token"])

    def user_of(self, token: str) -> str | None:
        return next((u for u, a in self.accounts.items() if a.get("token") == token), None)

    def all_tokens(self) -> set[str]:
        return {str(a.get("token")) for a in self.world["accounts"].values()} | self.tokens_seen


Change = tuple[str, dict[str, Any], str]


def _changes(step: Step, state: _State, rng: random.Random) -> Iterator[Change]:
    """(kind, changed arguments, the refusal) for each change of ``step`` that fails."""
    args = dict(step.arguments)
    tool = step.tool
    if tool in TOKEN_TOOLS and isinstance(args.get("token"), str):
        token = _same_shape(args["token"], rng, state.all_tokens())
        error = "The token is incorrect." if tool == "QueryBalance" else INVALID_TOKEN
        yield "invented_token", {**args, "token": token}, error
    if tool == "GetUserToken" and args.get("username") in state.accounts:
        real = state.accounts[args["username"]]["password"]
        yield (
            "wrong_password",
            {**args, "password": _other_password(real, rng)},
            ("The password is incorrect."),
        )
    if tool == "ModifyPassword" and state.user_of(str(args.get("token"))):
        wrong = _other_password(str(args.get("old_password")), rng)
        yield "wrong_password", {**args, "old_password": wrong}, "The old password is incorrect."
    first_forgot = tool == "ForgotPassword" and args.get("status") == "Forgot Password"
    if (tool == "GetUserToken" or first_forgot) and isinstance(args.get("username"), str):
        name = _other_username(args["username"], rng, set(state.accounts))
        yield "unknown_user", {**args, "username": name}, "The username does not exist."
    if tool == "QueryHealthData" and _times(args, "start_time", "end_time"):
        swapped = {**args, "start_time": args["end_time"], "end_time": args["start_time"]}
        yield "reversed_range", swapped, "The start time cannot be later than the end time."
    missing = _missing(tool, args, state, rng)
    if missing is not None:
        yield "missing_object", *missing


def _missing(
    tool: str, args: dict[str, Any], state: _State, rng: random.Random
) -> tuple[dict[str, Any], str] | None:
    world = state.world
    if tool in ("DeleteAlarm", "QueryAlarm") and _times(args, "time"):
        t = _other_time(args["time"], rng, {a[1] for a in world["alarms"]})
        return {**args, "time": t}, f"You have no alarm clock at time : {t}"
    if tool == "ModifyAlarm" and _times(args, "from_time"):
        t = _other_time(args["from_time"], rng, {a[1] for a in world["alarms"]})
        return {**args, "from_time": t}, f"You have no agenda at time : {t}"
    if tool in ("DeleteReminder", "ModifyReminder", "QueryReminder") and _times(args, "time"):
        content = rng.choice(OTHER_CONTENTS)
        t = _other_time(args["time"], rng, {r[2] for r in world["reminders"]})
        return {**args, "content": content, "time": t}, (
            f"You have no reminder about {content} or at time : {t}"
        )
    if tool in ("DeleteAgenda", "ModifyAgenda", "QueryAgenda") and "content" in args:
        content = rng.choice(OTHER_CONTENTS)
        what = "meeting" if tool == "DeleteAgenda" else "agenda"
        return {**args, "content": content}, f"You have no {what} about {content}"
    if tool in ("DeleteMeeting", "ModifyMeeting", "QueryMeeting") and args.get("meeting_topic"):
        topic = rng.choice(OTHER_TOPICS)
        changed = {**args, "meeting_topic": topic}
        if _times(args, "start_time"):
            changed["start_time"] = _other_time(args["start_time"], rng, set())
        return changed, f"You have no meeting about {topic}"
    if tool in ("CancelRegistration", "ModifyRegistration") and args.get("appointment_id"):
        known = set(world["appointments"])
        new_id = _same_shape(str(args["appointment_id"]), rng, known, string.digits)
        words = "is incorrect" if tool == "CancelRegistration" else "does not exist"
        return {**args, "appointment_id": new_id}, f"The appointment ID {words}."
    if tool == "QueryRegistration" and _dates(args, "date"):
        return {**args, "date": _other_date(args["date"], rng)}, "No appointments found."
    if tool in ("QueryScene", "DeleteScene") and args.get("name"):
        words = "Scene not found." if tool == "QueryScene" else "The scene does not exist."
        return {**args, "name": rng.choice(OTHER_SCENES)}, words
    if tool == "QueryStock" and args.get("stock_code"):
        if rng.random() < 0.5 and _dates(args, "date"):
            late = _other_date(args["date"], rng, years=3)
            return {**args, "date": late}, "The stock price of this date is not maintained."
        code = _same_shape(
            str(args["stock_code"]), rng, set(world["stocks"]), string.ascii_uppercase
        )
        return {**args, "stock_code": code}, "The stock code does not exist."
    if tool in ("SymptomSearch", "EmergencyKnowledge") and args.get("symptom"):
        return {**args, "symptom": rng.choice(OTHER_SYMPTOMS)}, "The symptom does not exist."
    if tool == "QueryHistoryToday" and isinstance(args.get("date"), str):
        days = {d for d in world["history_dates"]}
        day = next(d for d in _month_days(rng) if d not in days)
        return {**args, "date": day}, "The date is not in the database."
    if tool == "CancelTimedSwitch" and args.get("device_id"):
        device = _same_shape(str(args["device_id"]), rng, set(), string.digits)
        return {**args, "device_id": device}, "device_id does not exist."
    if tool == "QueryHealthData" and args.get("user_id"):
        user = _same_shape(str(args["user_id"]), rng, set(), string.digits)
        return {**args, "user_id": user}, "The user id does not exist."
    return None


def _insertions(step: Step, after: _State, rng: random.Random) -> Iterator[tuple[str, Step]]:
    """(kind, an inserted call that fails) for each insertion after ``step``."""
    args = dict(step.arguments)
    if step.error is not None:
        return
    if step.tool == "AppointmentRegistration":
        taken = "This appointment has already been registered."
        yield "repeated_creation", Step(step.tool, args, None, taken)
    if step.tool == "RegisterUser":
        yield "repeated_creation", Step(step.tool, args, None, "The username already exists.")
    if step.tool == "DeleteAccount":
        if rng.random() < 0.5:
            yield "after_account_deleted", Step(step.tool, args, None, INVALID_TOKEN)
        else:
            user = _holder(step, after)
            if user is not None:
                call = {"username": user, "password": "?"}
                yield "after_account_deleted", Step("GetUserToken", call, None,
                                                    "The username does not exist.")  # fmt: skip
    if step.tool == "ModifyPassword" and isinstance(args.get("old_password"), str):
        user = after.user_of(str(args.get("token")))
        if user is not None:
            call = {"username": user, "password": args["old_password"]}
            yield "stale_password", Step("GetUserToken", call, None, "The password is incorrect.")


def _holder(step: Step, after: _State) -> str | None:
    """The account a deleted token belonged to (in the initial accounts)."""
    token = step.arguments.get("token")
    return next((u for u, a in after.world["accounts"].items() if a.get("token") == token), None)


def _same_shape(value: str, rng: random.Random, taken: set[str], alphabet: str = "") -> str:
    letters = alphabet or string.ascii_lowercase + string.digits
    while True:
        out = "".join(rng.choice(letters) for _ in value) or "x"
        if out not in taken and out != value:
            return out


def _other_password(real: str, rng: random.Random) -> str:
    options = [real + "1", real.capitalize(), "password123", real[:-1] or "pass", "123456"]
    return rng.choice([o for o in options if o != real])


def _other_username(name: str, rng: random.Random, taken: set[str]) -> str:
    spaced = "".join(f" {c}" if c.isupper() and i else c for i, c in enumerate(name))
    options = [name.lower(), spaced, name + "1", name.capitalize() + "_"]
    return rng.choice([o for o in options if o not in taken and o != name] or [name + "_x"])


def _times(args: Mapping[str, Any], *names: str) -> bool:
    try:
        return all(bool(datetime.strptime(str(args[n]), TIME)) for n in names)
    except (KeyError, ValueError):
        return False


def _dates(args: Mapping[str, Any], name: str) -> bool:
    try:
        return bool(datetime.strptime(str(args[name]), "%Y-%m-%d"))
    except (KeyError, ValueError):
        return False


def _other_time(value: str, rng: random.Random, taken: set[str]) -> str:
    start = datetime.strptime(value, TIME)
    while True:
        out = (start + timedelta(hours=rng.choice((1, 2, 3, -1, -2, 5)))).strftime(TIME)
        if out not in taken:
            return out


def _other_date(value: str, rng: random.Random, years: int = 0) -> str:
    start = datetime.strptime(value, "%Y-%m-%d") + timedelta(days=365 * years)
    return (start + timedelta(days=rng.choice((1, 2, 3, 7, 14)))).strftime("%Y-%m-%d")


def _month_days(rng: random.Random) -> Iterator[str]:
    while True:
        yield f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
