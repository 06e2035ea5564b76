"""The compiled constraint matcher.

Fatal sequences (an abandoned chain's prefix plus its terminal tool) are compiled once
into automata over tool ids, so a check or a lookup costs the same whatever the number
of archived chains:

- contiguous sequences: an Aho-Corasick automaton; a plan is scanned once, and the
  continuations that would complete a fatal sequence after an executed prefix are read
  off the state the prefix leads to;
- gapped sequences (a rule that opts in): a trie walked as a set of states, each tool
  of the plan advancing every state that has an edge for it;
- the seed's prefix check (the seed: the design note ``docs/design.md`` names): a trie
  of abandoned prefixes whose nodes keep the earliest archived chain ending there, so
  the seed's first-match-in-archive-order verdict comes from one walk down the
  candidate.

A constraint's condition (``when``) narrows it: it blocks only when every condition
holds for the given context.  A condition whose field the context lacks holds (fails
closed) unless the matcher is built with ``missing_field="allow"``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sidecar.model import ArchivedConstraint, CheckMode, CheckResult, Collision, Condition
from sidecar.rules import wording
from sidecar.rules.wording import Reading
from sidecar.trust.neutralize import shown

MissingField = Literal["block", "allow"]


# ---- conditions ----------------------------------------------------------------------
def _lookup(context: Mapping[str, Any], cond: Condition) -> tuple[bool, Any]:
    if cond.step is not None:
        scoped = f"{cond.step}.{cond.field}"
        if scoped in context:
            return True, context[scoped]
    if cond.field in context:
        return True, context[cond.field]
    return False, None


def _compare(left: Any, op: str, right: Any) -> bool | None:
    """``left op right``, or ``None`` when the two cannot be compared."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in (left, right)):
        return None  # NaN compares false both ways: it must never read "does not hold"
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    numeric = (int, float)
    if (
        not isinstance(left, numeric)
        or not isinstance(right, numeric)
        or isinstance(left, bool)
        or isinstance(right, bool)
    ):
        return None
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    if op == "<":
        return left < right
    return left <= right


def evaluate(
    when: Sequence[Condition], context: Mapping[str, Any], missing_field: MissingField = "block"
) -> tuple[bool, str]:
    """Whether the constraint applies under ``context``, and why."""
    if not when:
        return True, "unconditional"
    reasons: list[str] = []
    for cond in when:
        present, value = _lookup(context, cond)
        if not present:
            if missing_field == "allow":
                return False, f"{cond.describe()}: field missing from context (allowed)"
            reasons.append(f"{cond.describe()}: field missing from context, failing closed")
            continue
        verdict = _compare(value, cond.op, cond.value)
        if verdict is None:
            reasons.append(f"{cond.describe()}: cannot compare {value!r}, failing closed")
        elif verdict:
            reasons.append(f"{cond.describe()} holds ({value!r})")
        else:
            return False, f"{cond.describe()} does not hold ({value!r})"
    return True, "; ".join(reasons)


# ---- automata ------------------------------------------------------------------------
@dataclass
class _Trie:
    children: list[dict[str, int]] = field(default_factory=lambda: [{}])
    depth: list[int] = field(default_factory=lambda: [0])
    # constraints whose sequence ends at a child, by the tool on that edge
    completions: list[dict[str, list[int]]] = field(default_factory=lambda: [{}])
    # a few constraints passing through the node as a proper prefix, and how many
    through: list[list[int]] = field(default_factory=lambda: [[]])
    through_count: list[int] = field(default_factory=lambda: [0])

    def insert(self, seq: Sequence[str], idx: int, sample: int) -> None:
        node = 0
        for pos, tool in enumerate(seq):
            if pos == len(seq) - 1:
                self.completions[node].setdefault(tool, []).append(idx)
            nxt = self.children[node].get(tool)
            if nxt is None:
                nxt = len(self.children)
                self.children[node][tool] = nxt
                self.children.append({})
                self.depth.append(self.depth[node] + 1)
                self.completions.append({})
                self.through.append([])
                self.through_count.append(0)
            node = nxt
            if pos < len(seq) - 1:
                self.through_count[node] += 1
                if len(self.through[node]) < sample:
                    self.through[node].append(idx)


class _AhoCorasick(_Trie):
    def __init__(self) -> None:
        super().__init__()
        self.fail: list[int] = [0]
        self.comp_link: list[int] = [0]
        self.warn_link: list[int] = [0]

    def build(self) -> None:
        n = len(self.children)
        self.fail = [0] * n
        self.comp_link = [0] * n  # nearest proper suffix state with completions
        self.warn_link = [0] * n  # nearest proper suffix state that is a proper prefix
        queue: deque[int] = deque()
        for child in self.children[0].values():
            queue.append(child)
        while queue:
            node = queue.popleft()
            f = self.fail[node]
            self.comp_link[node] = f if self.completions[f] else self.comp_link[f]
            self.warn_link[node] = f if self.through_count[f] else self.warn_link[f]
            for tool, child in self.children[node].items():
                g = f
                while g and tool not in self.children[g]:
                    g = self.fail[g]
                target = self.children[g].get(tool, 0)
                self.fail[child] = target if target != child else 0
                queue.append(child)

    def step(self, state: int, tool: str) -> int:
        while state and tool not in self.children[state]:
            state = self.fail[state]
        return self.children[state].get(tool, 0)

    def run(self, seq: Iterable[str]) -> int:
        state = 0
        for tool in seq:
            state = self.step(state, tool)
        return state

    def suffix_states(self, state: int, links: list[int], has: Sequence[Any]) -> Iterable[int]:
        node = state if has[state] else links[state]
        while node:
            yield node
            node = links[node]


@dataclass(frozen=True)
class _Hit:
    constraint: ArchivedConstraint
    matched: tuple[str, ...]


@dataclass(frozen=True)
class Hint:
    """A fatal sequence a next tool would complete, that does not block: ``contested``
    or ``unconfirmed`` (it warns), or ``conditional`` (its condition does not hold
    under this context)."""

    text: str
    constraint: ArchivedConstraint
    standing: Literal["contested", "unconfirmed", "conditional"]

    def __str__(self) -> str:
        return self.text


class ConstraintMatcher:
    """Compiled fatal sequences; immutable once built (rebuild to add constraints)."""

    def __init__(
        self,
        constraints: Iterable[ArchivedConstraint],
        missing_field: MissingField = "block",
        warning_sample: int = 3,
    ) -> None:
        self.missing_field = missing_field
        self.constraints: list[ArchivedConstraint] = sorted(constraints, key=lambda c: c.order)
        self.tools = frozenset(t for c in self.constraints for t in c.sequence)
        """Every tool a compiled sequence names."""
        self._contig = _AhoCorasick()
        self._gapped = _Trie()
        self._prefix_children: list[dict[str, int]] = [{}]
        self._prefix_first: list[int] = [-1]
        for idx, c in enumerate(self.constraints):
            (self._gapped if c.gapped else self._contig).insert(c.sequence, idx, warning_sample)
            if not c.unconfirmed:  # the seed's check blocks only on independent evidence
                self._insert_prefix(c.prefix, idx)
        self._contig.build()
        self._next_cache: dict[Any, Any] = {}
        self._has_gapped = len(self._gapped.children) > 1

    def __len__(self) -> int:
        return len(self.constraints)

    def _insert_prefix(self, prefix: Sequence[str], idx: int) -> None:
        node = 0
        for tool in prefix:
            nxt = self._prefix_children[node].get(tool)
            if nxt is None:
                nxt = len(self._prefix_children)
                self._prefix_children[node][tool] = nxt
                self._prefix_children.append({})
                self._prefix_first.append(-1)
            node = nxt
        if self._prefix_first[node] == -1:  # constraints arrive in archive order
            self._prefix_first[node] = idx

    # ---- plan checks --------------------------------------------------------------
    def _matches(self, plan: Sequence[str]) -> list[_Hit]:
        hits: list[_Hit] = []
        seen: set[int] = set()
        ac = self._contig
        state = 0
        for pos, tool in enumerate(plan):
            prev = state
            state = ac.step(state, tool)
            # a sequence ends here when its prefix is a suffix of plan[:pos] (a suffix
            # state of `prev`) and its terminal is `tool`
            for node in ac.suffix_states(prev, ac.comp_link, ac.completions):
                for idx in ac.completions[node].get(tool, ()):
                    if idx not in seen:
                        seen.add(idx)
                        start = pos + 1 - len(self.constraints[idx].sequence)
                        hits.append(_Hit(self.constraints[idx], tuple(plan[start : pos + 1])))
        if self._has_gapped:
            for idx in self._gapped_matches(plan):
                if idx not in seen:
                    seen.add(idx)
                    hits.append(_Hit(self.constraints[idx], self.constraints[idx].sequence))
        return hits

    def _gapped_states(self, seq: Sequence[str]) -> set[int]:
        trie = self._gapped
        states = {0}
        for tool in seq:
            states |= {trie.children[s][tool] for s in states if tool in trie.children[s]}
        return states

    def _gapped_matches(self, plan: Sequence[str]) -> list[int]:
        trie = self._gapped
        states = {0}
        found: list[int] = []
        for tool in plan:
            for s in states:
                found.extend(trie.completions[s].get(tool, ()))
            states |= {trie.children[s][tool] for s in states if tool in trie.children[s]}
        return found

    def check(
        self,
        plan: Sequence[str],
        context: Mapping[str, Any] | None = None,
        mode: CheckMode = "sequence",
        reading: Reading | None = None,
    ) -> CheckResult:
        """``reading``: what the viewer may read (``None``: everything); the rules it may
        not read are worded by the sidecar (:mod:`sidecar.rules.wording`)."""
        if mode == "prefix":
            return self._check_prefix(plan, reading)
        if mode != "sequence":
            raise ValueError(f"mode must be 'sequence' or 'prefix', got {mode!r}")
        context = context or {}
        collisions: list[Collision] = []
        warnings: list[str] = []
        for hit in self._matches(plan):
            c = hit.constraint
            readable = reading is None or reading.reads_sequence(c)
            owns = reading is None or reading.owns(c.sources)
            applies, why = evaluate(c.when, context, self.missing_field)
            if applies and c.warn_only:
                if c.unconfirmed and not readable:
                    continue  # one untrusted source's word, not the viewer's
                warnings.append(f"plan contains {wording.standing_text(c, owns)}")
            elif applies:
                collision = _collision(c, hit.matched, why, context, readable)
                collisions.append(collision if owns else replace(collision, pointer=""))
        return CheckResult(
            safe=not collisions,
            collisions=tuple(collisions),
            mode="sequence",
            warnings=tuple(warnings),
        )

    def _check_prefix(self, plan: Sequence[str], reading: Reading | None = None) -> CheckResult:
        """The seed's ``check_prefix_collision``: the first chain, in archive order,
        whose n-1 first tools equal the candidate's n-1 first tools."""
        node, best, best_len = 0, -1, 0
        for depth, tool in enumerate(plan, 1):
            node = self._prefix_children[node].get(tool, -1)
            if node == -1:
                break
            first = self._prefix_first[node]
            if first != -1 and (best == -1 or first < best):
                best, best_len = first, depth
        if best == -1:
            return CheckResult(safe=True, collisions=(), mode="prefix")
        c = self.constraints[best]
        candidate_prefix = tuple(plan[:best_len])
        if reading is None or reading.reads_sequence(c):
            rule, signature = c.rule, c.signature
        else:  # the seed's message, with the sidecar's words for another source's text
            rule, signature = wording.sequence_text(c, False), wording.WITHHELD
        pointer = c.pointer if reading is None or reading.owns(c.sources) else ""
        message = (
            f"PREFIX_COLLISION: Sequence {candidate_prefix} matches the "
            f"prefix of an abandoned chain. Rule: {rule}. "
            f"Expected failure: {signature}"
        )
        collision = Collision(c.chain_id, candidate_prefix, rule, signature, pointer, message)
        return CheckResult(safe=False, collisions=(collision,), mode="prefix")

    def seed_verdict(self, plan: Sequence[str]) -> tuple[bool, str | None]:
        """``(is_safe, rejection_reason)`` exactly as the seed returns them."""
        result = self._check_prefix(plan)
        return result.safe, (result.collisions[0].reason if result.collisions else None)

    # ---- lookup -------------------------------------------------------------------
    def next_steps(
        self, after: Sequence[str], context: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, list[tuple[ArchivedConstraint, str]]], dict[str, list[Hint]]]:
        """After executing ``after``: the tools that would complete a fatal sequence under
        ``context`` (to withhold, with the constraint and why), and the tools that would
        complete one only under another context (to warn about).  Answers are cached per
        prefix and context (the matcher is immutable); callers must not mutate them."""
        context = context or {}
        try:
            key: Any = (tuple(after), frozenset(context.items()))
        except TypeError:  # unhashable context values: no caching
            key = None
        if key is not None and key in self._next_cache:
            cached: tuple[
                dict[str, list[tuple[ArchivedConstraint, str]]], dict[str, list[Hint]]
            ] = self._next_cache[key]
            return cached
        answer = self._next_steps(after, context)
        if key is not None:
            if len(self._next_cache) >= 4096:
                self._next_cache.clear()
            self._next_cache[key] = answer
        return answer

    def _next_steps(
        self, after: Sequence[str], context: Mapping[str, Any]
    ) -> tuple[dict[str, list[tuple[ArchivedConstraint, str]]], dict[str, list[Hint]]]:
        blocked: dict[str, list[tuple[ArchivedConstraint, str]]] = {}
        conditional: dict[str, list[Hint]] = {}
        for tool, idxs in self._completions_after(after):
            for idx in idxs:
                c = self.constraints[idx]
                applies, why = evaluate(c.when, context, self.missing_field)
                if applies and c.warn_only:
                    hint = Hint(
                        f"completes {standing(c)}", c, "contested" if c.contested else "unconfirmed"
                    )
                    conditional.setdefault(tool, []).append(hint)
                elif applies:
                    blocked.setdefault(tool, []).append((c, why))
                else:
                    text = (
                        f"completes fatal sequence {'>'.join(c.sequence)} when "
                        f"{' and '.join(w.describe() for w in c.when)} "
                        f"({c.pointer}); now {why}"
                    )
                    conditional.setdefault(tool, []).append(Hint(text, c, "conditional"))
        return blocked, conditional

    def completions(self, after: Sequence[str]) -> dict[str, list[ArchivedConstraint]]:
        """Every constraint each next tool would complete after ``after``, whatever its
        condition or status."""
        out: dict[str, list[ArchivedConstraint]] = {}
        for tool, idxs in self._completions_after(after):
            out.setdefault(tool, []).extend(self.constraints[i] for i in idxs)
        return out

    def _completions_after(self, after: Sequence[str]) -> Iterable[tuple[str, list[int]]]:
        ac = self._contig
        for node in ac.suffix_states(ac.run(after), ac.comp_link, ac.completions):
            yield from ac.completions[node].items()
        if self._has_gapped:
            for node in self._gapped_states(after):
                yield from self._gapped.completions[node].items()

    def warnings(
        self, after: Sequence[str], tool: str, limit: int = 3, reading: Reading | None = None
    ) -> list[str]:
        """Fatal sequences that ``after + [tool]`` is a proper prefix of (a step toward),
        worded for ``reading``'s viewer (``None``: one who reads everything)."""
        out: list[str] = []
        seq = [*after, tool]
        ac = self._contig
        nodes = ac.suffix_states(ac.run(seq), ac.warn_link, ac.through_count)
        candidates: list[tuple[int, int, int]] = [
            (idx, ac.depth[n], ac.through_count[n]) for n in nodes for idx in ac.through[n]
        ]
        if self._has_gapped:
            trie = self._gapped
            before = self._gapped_states(after)
            for s in before:
                child = trie.children[s].get(tool)
                if child is not None and trie.through_count[child]:
                    candidates += [
                        (i, trie.depth[child], trie.through_count[child])
                        for i in trie.through[child]
                    ]
        seen: set[int] = set()
        for idx, depth, _count in candidates:
            if idx in seen or len(out) >= limit:
                continue
            seen.add(idx)
            c = self.constraints[idx]
            if reading is not None and c.unconfirmed and not reading.reads_sequence(c):
                continue
            # every hit of a page may carry these, so they name the sequence, its
            # condition and the pointer; the rule's prose is one audit away
            readable = reading is None or reading.reads_sequence(c)
            owns = reading is None or reading.owns(c.sources)
            out.append(wording.toward(c, depth, readable, owns))
        return out


def _collision(
    c: ArchivedConstraint,
    matched: tuple[str, ...],
    why: str,
    context: Mapping[str, Any],
    readable: bool,
) -> Collision:
    gapped = " (gapped)" if c.gapped else ""
    head = f"plan contains fatal sequence {'>'.join(c.sequence)}{gapped}"
    if readable:
        return Collision(
            c.chain_id, matched, shown(c.rule), shown(c.signature), c.pointer, f"{head}: {why}"
        )
    return Collision(
        c.chain_id,
        matched,
        wording.sequence_text(c, False),
        wording.WITHHELD,
        "",
        f"{head}: {wording.why(c.when, context, False)}",
    )


def standing(c: ArchivedConstraint) -> str:
    """Why a fatal sequence in force only warns, for a viewer who reads it."""
    return wording.standing_text(c, True)
