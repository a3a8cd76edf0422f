"""Salient spans of news sentences: sentence splitting, dates and named entities.

The paper (Sec. 2.1) splits CustomNews articles into sentences and masks "salient spans ...
corresponding to named entities and dates", following REALM (Guu et al., 2020): a BERT tagger
trained on CoNLL-2003 for entities and a regular expression for dates. This module is rule-based
and dependency-free:

- Sentences: split at `.`, `!`, `?` (and closing quotes) followed by whitespace and a capital
  letter, a digit or an opening quote; never after titles ("Mr.", "Dr.", "St."), initials
  ("John F. Kennedy"), or month abbreviations before a day ("Jan. 5"); after initialisms and
  company abbreviations ("U.S.", "Inc.") only when the next word is a common sentence opener
  ("... in Washington, D.C. The mayor ..."). Decimals ("3.5") never split (no whitespace).
  Newlines always end a sentence (one paragraph per line).
- Dates: ISO dates, "May 3, 2014", "3 May 2014", "May 3", "3 May", "March 2014", decades
  ("1990s") and years 1900-2099 (not amounts like "$2014" or "2014.5").
- Named entities: runs of capitalised words, with connectors inside names ("Bank of America",
  "Leonardo da Vinci", "Procter & Gamble"), leading titles dropped ("President Barack Obama" ->
  "Barack Obama"), a possessive "'s" dropped; a clause-initial function word ("The", "In", "He")
  is not part of a name, and a single clause-initial word is not taken (its capital says
  nothing); a lone month or weekday is not an entity. Optionally a gazetteer of names (e.g. the
  entities TSV, or a list of Wikidata's size) matched exactly, longest first, through a trie.
- Overlaps: the longest span wins; on ties dates, then gazetteer names, then other entities.
"""

import bisect
import dataclasses
import re
import sys

from tlm.errors import DataError
from tlm.line_files import iter_tsv

_MONTHS = set(
  "January February March April May June July August September October November December".split()
)
_WEEKDAYS = set("Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split())
_MONTH_ABBREVS = set("jan feb mar apr jun jul aug sep sept oct nov dec".split())
# Abbreviations after which "." never ends a sentence (a name or a number follows).
_NO_BREAK = set(
  "mr mrs ms dr prof sen rep gov gen lt col sgt capt rev hon st mt ft vs v no nos "
  "vol fig pp".split()
)
# Abbreviations that may also end a sentence.
_MAYBE_BREAK = set("inc corp co ltd jr sr etc llc plc bros dept approx ave blvd".split())
# Words that open sentences; a capitalised one at the start of a clause is not a name.
_FUNCTION_WORDS = set(
  "A An The In On At To Of For From With By As But And Or Nor So Yet If When While Where After "
  "Before Since Until Although Though Because Once Then There Here This That These Those It "
  "Its He She They We I You His Her Their Our My Your Who What Which Why How Some Many Most "
  "All Both Each Every No Not Any One Two Three Several Such Also However Meanwhile Still "
  "Yesterday Today Tomorrow Last Next Earlier Later According Despite During Under Over "
  "Against Among Between Into Only Even More Less Instead Now Just Let Is Was Are Were Will "
  "Would Can Could Should May Might Must Do Does Did Has Have Had".split()
)
# Leading titles dropped from a name ("President Barack Obama" -> "Barack Obama").
_TITLES = set(
  "Mr Mrs Ms Dr Prof Sen Rep Gov Gen Lt Col Sgt Capt Rev Hon Sir Dame Lord Lady President "
  "Senator Governor Mayor Judge Justice Coach Chairman Chairwoman Chancellor King Queen Pope "
  "Prince Princess Prime Minister Secretary Representative Officer Detective".split()
)
_NOT_NAME_WORDS = _TITLES | {"I"}
_CONNECTORS = set("of de del della der den da di du la le van von y the for &".split())

# Words: initialisms ("U.S."), abbreviations that belong to names ("St.", "Inc."), single
# initials before a capitalised word ("F. Kennedy"), words with inner '-&' ("Coca-Cola", "AT&T",
# "O'Neill"), and "&" on its own.
_TOKEN = re.compile(
  r"(?:[^\W\d_]\.){2,}"
  r"|(?:St|Mt|Ft|Jr|Sr|Inc|Corp|Co|Ltd|Bros)\.(?=\s|$)"
  r"|[A-Z]\.(?=\s+[A-Z])"
  r"|[^\W\d_](?:[\w&'’-]*[^\W_])?"
  r"|&"
)
_POSSESSIVE = re.compile(r"['’]s$")

_MONTH = (
  r"(?:January|February|March|April|May|June|July|August|September|October|November|"
  r"December|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.)"
)
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
_DATE = re.compile(
  r"(?<![\w$£€/.-])(?:"
  rf"{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
  rf"|{_MONTH}\s+{_DAY}(?:,\s*|\s+){_YEAR}"
  rf"|{_DAY}\s+{_MONTH},?\s+{_YEAR}"
  rf"|{_MONTH}\s+{_DAY}(?![\d:])"
  rf"|{_DAY}\s+{_MONTH}"
  rf"|{_MONTH},?\s+{_YEAR}"
  r"|(?:19|20)\d0s"
  rf"|{_YEAR}"
  r")(?![\w%])(?!\.\d)(?!,\d{3})"
)
_HAS_YEAR = re.compile(rf"(?<!\d)({_YEAR})(?!\d|s\b)")
# Matches start only at the first mark of a run ("...."): a failed match from inside a long run
# would otherwise be retried at each of its marks (quadratic in the run's length).
_BREAK = re.compile(r"(?<![.!?])[.!?]+[\"”’')\]]*\s+")
_NEXT_WORD = re.compile(r"[\"“‘'(\[]*([\w’']+)")


@dataclasses.dataclass(frozen=True)
class Span:
  """A salient span of a sentence: `sentence[start:end] == text`; kind "date" or "entity"."""

  start: int
  end: int
  text: str
  kind: str


def split_sentences(text: str) -> list[str]:
  """Splits an article into sentences (rules in the module docstring)."""
  sentences = []
  for paragraph in text.splitlines():
    begin = 0
    for m in _BREAK.finditer(paragraph):
      if m.end() < len(paragraph) and _is_boundary(paragraph, m):
        sentences.append(paragraph[begin : m.end()].strip())
        begin = m.end()
    sentences.append(paragraph[begin:].strip())
  return [s for s in sentences if s]


def _word_before(text: str, end: int) -> str:
  """The last whitespace-separated word of `text[:end]` ("" if none), found by scanning back
  from `end`: slicing `text[:end]` at every boundary would be quadratic in the text."""
  stop = end
  while stop > 0 and text[stop - 1].isspace():
    stop -= 1
  start = stop
  while start > 0 and not text[start - 1].isspace():
    start -= 1
  return text[start:stop]


def _is_boundary(text: str, m: re.Match) -> bool:
  nxt = text[m.end()]
  if not (nxt.isupper() or nxt.isdigit() or nxt in "\"“‘'(["):
    return False
  punct = m.group(0).rstrip()
  if punct != ".":  # "!", "?", "...", or a closing quote after the period
    return True
  word = _word_before(text, m.start()).lstrip("\"“‘'([")
  key = word.lower()
  if key in _NO_BREAK or (len(word) == 1 and word.isupper()):
    return False
  next_word = _NEXT_WORD.match(text, m.end())
  opener = next_word is not None and next_word.group(1) in _FUNCTION_WORDS
  if key in _MONTH_ABBREVS:
    return not nxt.isdigit() and opener
  if "." in word or key in _MAYBE_BREAK:  # "U.S." (its last period is in m), "e.g", "Inc"
    return opener
  return True


class Gazetteer:
  """Exact, case-sensitive matching of known names on word boundaries, longest first.

  A name matches where the sentence's tokens from one token on spell it exactly, with as many
  tokens as the name alone has and the same first token (a token can end differently in a
  sentence: "B." before a capital is one token there, "B" and "." in the name "A. B." alone);
  of the names starting at a token the longest (in tokens) wins.

  An entity list of Wikidata's size (10^6 names and aliases) shares first words by the
  thousand ("The", "John"), so the names are not scanned: they are a trie over token
  boundaries kept as one sorted list, in which the names continuing a text are one contiguous
  run. From a token, the walk extends the text one token at a time and finds its run by binary
  search, stopping as soon as no name continues it: the cost per token is the number of tokens
  walked times log(names), whatever the number of names sharing a word. The first words are
  also a set, so that most tokens cost one lookup, and the run of each one met is kept.

  Args:
    names: entity names; names without an upper-case letter are ignored (common words).
  """

  def __init__(self, names):
    kept, first = set(), set()
    for name in names:
      name = name.strip()
      if not _has_upper(name):
        continue
      word = name.partition(" ")[0]
      if not word.isalpha():  # else the tokenizer's first word is all of it (a quick path)
        word = _TOKEN.search(name)
        if word is None:
          continue
        word = word.group(0)
      kept.add(name)
      first.add(word)
    self._names = sorted(kept)
    self._first = first
    self._runs = {}  # first word -> its run of names, for the first words met so far
    self._shape = {}  # name -> (first token, tokens), for the names found so far (at most all)

  def __len__(self):
    return len(self._names)

  def nbytes(self) -> int:
    """The memory the matcher holds: its strings, the list and the set (CPython sizes)."""
    strings = sum(map(sys.getsizeof, self._names)) + sum(map(sys.getsizeof, self._first))
    return strings + sys.getsizeof(self._names) + sys.getsizeof(self._first)

  @classmethod
  def from_file(cls, path: str) -> "Gazetteer":
    """One name per line, or an entities TSV (`qid<TAB>name<TAB>...`: the second column)."""

    def names():  # streamed: the lines are not all held beside the names kept
      for line_no, cols in iter_tsv(path):
        if len(cols) > 1 and not cols[1].strip():
          raise DataError("empty name in the second column", path, line_no)
        yield cols[1] if len(cols) > 1 else cols[0]

    return cls(names())

  def _tokens_of(self, name: str) -> tuple[str, int]:
    """(first token, number of tokens) of a name tokenised alone, as a match requires."""
    shape = self._shape.get(name)
    if shape is None:
      words = _TOKEN.findall(name)
      shape = self._shape[name] = (words[0], len(words))
    return shape

  def _run(self, word: str) -> tuple[int, int]:
    """[lo, hi) of the names that start with `word` (as a string), found once per word."""
    run = self._runs.get(word)
    if run is None:
      names = self._names
      lo = bisect.bisect_left(names, word)
      # The least string above every one starting with `word`: its last character (that is not
      # the largest) plus one.
      stem = word.rstrip("\U0010ffff")
      hi = bisect.bisect_left(names, stem[:-1] + chr(ord(stem[-1]) + 1), lo) if stem else len(names)
      run = self._runs[word] = (lo, hi)
    return run

  def find(self, sentence: str, tokens: list[re.Match]) -> list[Span]:
    """All matches (possibly overlapping) of names in a tokenised sentence: at most one per
    token, the longest name starting there."""
    names, first = self._names, self._first
    spans = []
    for i, tok in enumerate(tokens):
      word = tok.group(0)
      if word not in first:
        continue
      start, found = tok.start(), None
      lo, hi = self._run(word)  # the walk stays within it
      for j in range(i, len(tokens)):
        end = tokens[j].end()
        text = sentence[start:end]
        if j > i:
          lo = bisect.bisect_left(names, text, lo, hi)
        if lo == hi or not names[lo].startswith(text):
          break  # no name continues the text: no longer one can match
        if names[lo] == text and self._tokens_of(text) == (word, j - i + 1):
          found = Span(start, end, text, "entity")
      if found is not None:
        spans.append(found)
    return spans


def _has_upper(text: str) -> bool:
  if text.isascii():
    return text != text.lower()
  return any(ch.isupper() for ch in text)


def _is_clause_initial(sentence: str, tok: re.Match) -> bool:
  i = tok.start()  # scan back over whitespace (no slice: linear in the sentence overall)
  while i > 0 and sentence[i - 1].isspace():
    i -= 1
  return i == 0 or sentence[i - 1] in "\"“‘'(:;—–"


def _heuristic_entities(sentence: str, tokens: list[re.Match]) -> list[Span]:
  """Capitalised runs with connectors inside; titles, openers and possessives trimmed."""
  runs, run = [], []
  for tok in tokens:
    word = tok.group(0)
    joined = not run or sentence[run[-1].end() : tok.start()].isspace()
    capital = word[0].isupper() and word not in _NOT_NAME_WORDS
    if (capital or word in _CONNECTORS) and joined:
      run.append(tok)
    elif capital or word in _CONNECTORS:
      runs.append(run)
      run = [tok]
    else:
      runs.append(run)
      run = []
  runs.append(run)
  spans = []
  for run in runs:
    for part in _split_run(sentence, run):
      span = _trim(sentence, part)
      if span is not None:
        spans.append(span)
  return spans


def _split_run(sentence: str, run: list[re.Match]) -> list[list[re.Match]]:
  """Cuts a run into names: connectors (at most two in a row) only between capitalised words.

  A clause-initial function word ("The", "In") is dropped, and so is a clause-initial word
  before "of" / "for", whose capital may be the sentence's alone: "Shares of Microsoft" ->
  "Microsoft" (at the price of "Bank of America" -> "America" there; a gazetteer keeps it).
  Name-internal connectors ("Leonardo da Vinci", "Procter & Gamble") are unaffected.
  """
  parts, part, pending = [], [], []
  for i, tok in enumerate(run):
    word = tok.group(0)
    if word in _CONNECTORS:
      pending.append(tok)
      continue
    before_connector = i + 1 < len(run) and run[i + 1].group(0) in ("of", "for")
    if (word in _FUNCTION_WORDS or before_connector) and _is_clause_initial(sentence, tok):
      parts.append(part)
      part, pending = [], []
      continue
    if pending:
      if part and len(pending) <= 2:
        part.extend(pending)
      else:
        parts.append(part)
        part = []
      pending = []
    part.append(tok)
  parts.append(part)
  return [p for p in parts if p]


def _trim(sentence: str, part: list[re.Match]) -> Span | None:
  words = [t.group(0) for t in part]
  if all(w in _MONTHS or w in _WEEKDAYS for w in words):
    return None
  if len(part) == 1 and (_is_clause_initial(sentence, part[0]) or words[0] in _FUNCTION_WORDS):
    return None
  start, end = part[0].start(), part[-1].end()
  possessive = _POSSESSIVE.search(words[-1])
  if possessive and len(words[-1]) > 2:
    end -= 2
  return Span(start, end, sentence[start:end], "entity")


def find_spans(sentence: str, gazetteer: Gazetteer | None = None) -> list[Span]:
  """Salient spans of a sentence, non-overlapping, in text order.

  Args:
    sentence: one sentence.
    gazetteer: optional known names, preferred over heuristic entities of the same length.

  Returns:
    Date and named-entity spans (see the module docstring for the rules).
  """
  tokens = list(_TOKEN.finditer(sentence))
  candidates = [(0, Span(m.start(), m.end(), m.group(0), "date")) for m in _DATE.finditer(sentence)]
  if gazetteer is not None:
    candidates += [(1, s) for s in gazetteer.find(sentence, tokens)]
  candidates += [(2, s) for s in _heuristic_entities(sentence, tokens)]
  candidates.sort(key=lambda c: (c[1].start - c[1].end, c[0], c[1].start))
  # Characters already covered by a chosen span: testing a candidate against them costs its
  # length, not the number of spans chosen so far (quadratic in a sentence full of dates).
  taken = bytearray(len(sentence))
  chosen = []
  for _, span in candidates:
    if taken.find(1, span.start, span.end) < 0:
      taken[span.start : span.end] = b"\x01" * (span.end - span.start)
      chosen.append(span)
  return sorted(chosen, key=lambda s: s.start)


def years_mentioned(spans: list[Span]) -> set[int]:
  """The years (1900-2099) written in the date spans; decades ("1990s") do not count."""
  return {int(y) for s in spans if s.kind == "date" for y in _HAS_YEAR.findall(s.text)}
