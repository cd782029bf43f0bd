"""A generated Obsidian-style vault with realistic note names and aliases (seeded, reproducible).

Nothing here knows how Explorer ranks: the vault imitates a person's vault. Notes are named the
way people name them (topics with facets such as "Docker setup" and "Docker troubleshooting",
people, projects, books as "Book - Title", meetings and daily notes named by date, maps of
content); about 40 % carry frontmatter `aliases` (abbreviations, short names, first names).
Bodies are sentences from the note's topic that link to related notes by name (`[[Name]]`,
sometimes `[text](Name.md)`), so a note's name also appears in the notes around it, and maps of
content link to dozens of notes: the hard case for finding a note by its name.

Two ways of linking (`links=`):

- `random` (the default, what the other benchmarks read): a sentence about the note's own topic
  ends with a link to a note picked uniformly from the whole vault, so nothing in the text around
  a link points to its note.
- `text`: links follow the text, as a person writes them. Every note has words of its own (a word
  of its name, a subject's words, shared by its facet notes, plus a few of each note's) and
  its sentences lean on them; a sentence that links to a note is written about that note: some of
  its words come from the linked note's own words, and the link stands inside the sentence
  (`... as in [[Name]] ...`), at its start or at its end. The linked note is one of the same topic
  more often than not.

  A word of a note's name is among its own words because people write about a thing in the words
  that name it: a note on "Sourdough starter" says "starter", a sentence about a meeting with Anna
  says "Anna". Without it (the first version of this style) a note's own words were only words its
  whole topic shares, and a word of the linked note's name stood in the sentence around a removed
  link for 8 % of links, against 48 % in sample_vault and 31 % in a part of the public Obsidian
  help vault (`python -m benchmarks.link_suggest --diagnose`, BENCHMARKS.md): the text around a
  link said less about its note than people's text does. With every word of the name it would say
  more (75 %); one word of it, picked at random, is the plainest rule.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TOPICS: dict[str, dict[str, list[str]]] = {
    "Programming": {
        "subjects": [
            "Docker",
            "Kubernetes",
            "Python packaging",
            "Rust ownership",
            "Git rebase",
            "PostgreSQL indexes",
            "JavaScript promises",
            "TypeScript generics",
            "Bash scripting",
            "Regular expressions",
            "Nginx reverse proxy",
            "SSH keys",
            "Vim motions",
            "Unit testing",
            "Code review",
            "Machine learning",
            "Terraform modules",
            "Redis caching",
            "GraphQL schema",
            "Linux permissions",
        ],
        "words": [
            "container",
            "image",
            "build",
            "deploy",
            "cluster",
            "query",
            "index",
            "function",
            "error",
            "config",
            "server",
            "client",
            "cache",
            "module",
            "version",
            "branch",
            "commit",
            "test",
            "release",
            "log",
            "memory",
            "thread",
            "request",
            "response",
            "latency",
            "schema",
            "migration",
            "package",
            "dependency",
        ],
    },
    "Cooking": {
        "subjects": [
            "Sourdough starter",
            "Banana bread",
            "Chana masala",
            "Pad thai",
            "Ramen broth",
            "Pizza dough",
            "Cold brew coffee",
            "Espresso",
            "Kimchi",
            "Risotto",
            "Chocolate chip cookies",
            "Pho",
            "Shakshuka",
            "Fermented hot sauce",
            "Meal prep",
        ],
        "words": [
            "flour",
            "water",
            "salt",
            "oven",
            "heat",
            "dough",
            "knead",
            "ferment",
            "spice",
            "garlic",
            "onion",
            "butter",
            "sugar",
            "bake",
            "simmer",
            "taste",
            "recipe",
            "bowl",
            "pan",
            "minutes",
            "temperature",
            "grind",
            "roast",
            "broth",
            "noodles",
            "rice",
            "yeast",
            "starter",
        ],
    },
    "Health": {
        "subjects": [
            "Sleep hygiene",
            "Running plan",
            "Strength training",
            "Intermittent fasting",
            "Blood pressure",
            "Meditation practice",
            "Knee injury",
            "Vitamin D",
            "Posture",
            "Stretching routine",
        ],
        "words": [
            "sleep",
            "heart",
            "rate",
            "weight",
            "muscle",
            "rest",
            "doctor",
            "pain",
            "dose",
            "habit",
            "morning",
            "evening",
            "breath",
            "focus",
            "stress",
            "energy",
            "walk",
            "run",
            "squat",
            "recovery",
        ],
    },
    "Finance": {
        "subjects": [
            "Index funds",
            "Emergency fund",
            "Tax return",
            "Mortgage",
            "Budget",
            "Retirement account",
            "Credit card points",
            "Stock options",
            "Rental income",
            "Insurance",
        ],
        "words": [
            "account",
            "interest",
            "rate",
            "fee",
            "tax",
            "income",
            "expense",
            "savings",
            "fund",
            "portfolio",
            "bank",
            "loan",
            "payment",
            "year",
            "month",
            "return",
            "risk",
            "balance",
        ],
    },
    "Learning": {
        "subjects": [
            "Spaced repetition",
            "Zettelkasten",
            "Learning Japanese",
            "Spanish verbs",
            "Note taking",
            "Deliberate practice",
            "Feynman technique",
            "Reading habits",
            "Public speaking",
            "Touch typing",
        ],
        "words": [
            "review",
            "card",
            "memory",
            "practice",
            "lesson",
            "word",
            "grammar",
            "note",
            "idea",
            "link",
            "habit",
            "session",
            "goal",
            "progress",
            "book",
            "chapter",
            "question",
            "answer",
        ],
    },
    "Home": {
        "subjects": [
            "Garden beds",
            "Tomato plants",
            "Compost",
            "Bike maintenance",
            "Kitchen renovation",
            "Home network",
            "Solar panels",
            "Heating system",
            "Houseplants",
            "Moving checklist",
        ],
        "words": [
            "water",
            "soil",
            "plant",
            "seed",
            "chain",
            "tire",
            "wall",
            "paint",
            "router",
            "cable",
            "panel",
            "roof",
            "boiler",
            "leaf",
            "light",
            "box",
            "tool",
            "window",
            "floor",
        ],
    },
}

FACETS = [
    "basics",
    "setup",
    "troubleshooting",
    "cheatsheet",
    "ideas",
    "notes",
    "FAQ",
    "tips",
    "reading list",
    "experiments",
    "log",
    "questions",
]

PEOPLE = [
    "Anna Schmidt",
    "Marcus Chen",
    "Priya Raman",
    "Tom Okafor",
    "Lena Fischer",
    "Diego Alvarez",
    "Sofia Rossi",
    "Kenji Watanabe",
    "Amara Nwosu",
    "Jonas Berg",
    "Maya Cohen",
    "Oliver Grant",
    "Chloe Martin",
    "Ravi Patel",
    "Elena Petrova",
    "Samuel Adeyemi",
]
PROJECTS = [
    "Project Phoenix",
    "Project Atlas",
    "Website redesign",
    "Data migration",
    "Mobile app launch",
    "Quarterly planning",
    "Hiring pipeline",
    "Customer onboarding",
    "Search relevance",
    "Home office setup",
]
BOOKS = [
    "Deep Work",
    "Thinking, Fast and Slow",
    "The Pragmatic Programmer",
    "Atomic Habits",
    "Sapiens",
    "The Design of Everyday Things",
    "Designing Data-Intensive Applications",
    "How to Take Smart Notes",
    "The Body Keeps the Score",
    "Project Hail Mary",
]
PLACES = ["Lisbon", "Kyoto", "Berlin", "Mexico City", "Reykjavik", "Cape Town", "Vancouver", "Hanoi"]

#: Short names people give a subject (used as aliases).
SHORT = {
    "Kubernetes": "K8s",
    "JavaScript promises": "JS promises",
    "TypeScript generics": "TS generics",
    "PostgreSQL indexes": "Postgres indexes",
    "Machine learning": "ML",
    "Regular expressions": "regex",
    "Spaced repetition": "SRS",
    "Intermittent fasting": "IF",
    "Retirement account": "401k",
    "Chocolate chip cookies": "cookies",
    "Cold brew coffee": "cold brew",
    "Vitamin D": "vit D",
    "Home network": "LAN",
    "Zettelkasten": "slip box",
    "Learning Japanese": "Japanese",
    "Designing Data-Intensive Applications": "DDIA",
    "The Pragmatic Programmer": "Pragmatic Programmer",
    "Thinking, Fast and Slow": "TFAS",
    "How to Take Smart Notes": "Smart Notes",
    "Project Phoenix": "Phoenix",
    "Project Atlas": "Atlas",
    "Search relevance": "relevance project",
    "Sourdough starter": "levain",
    "Pad thai": "phad thai",
    "Emergency fund": "rainy day fund",
    "Index funds": "ETFs",
}

FILLER = [
    "I noticed that",
    "The main point is that",
    "Next time",
    "According to the docs,",
    "In short,",
    "A colleague said",
    "It turns out",
    "Remember:",
    "The trick is that",
    "After a week,",
]


@dataclass(frozen=True, slots=True)
class GenNote:
    """One generated note."""

    path: str
    """Vault-relative path."""
    name: str
    """The file name without `.md` (Obsidian's title)."""
    aliases: tuple[str, ...]
    """Frontmatter aliases."""
    text: str
    """The file's content."""


#: Link styles of `generate`.
LINK_STYLES = ("random", "text")


def generate(seed: int = 7, facets_per_subject: int = 2, links: str = "random") -> list[GenNote]:
    """The notes of the vault (about 300), reproducible from `seed`; `links` as the module says."""
    if links not in LINK_STYLES:
        raise ValueError(f"links must be one of {LINK_STYLES}, not {links!r}")
    rng = random.Random(seed)
    plans: list[tuple[str, str, tuple[str, ...], list[str]]] = []  # folder, name, aliases, words
    taken: set[str] = set()

    def plan(folder: str, name: str, aliases: tuple[str, ...], words: list[str]) -> None:
        if name.lower() in taken:
            return
        aliases = tuple(a for a in aliases if a.lower() not in taken and a.lower() != name.lower())
        taken.add(name.lower())
        taken.update(a.lower() for a in aliases)
        plans.append((folder, name, aliases, words))

    for topic, spec in TOPICS.items():
        words = spec["words"]
        plan(topic, f"{topic} MOC", (f"{topic} index",) if rng.random() < 0.5 else (), words)
        for subject in spec["subjects"]:
            short = SHORT.get(subject)
            plan(topic, subject, (short,) if short else (), words)
            for facet in rng.sample(FACETS, facets_per_subject):
                aliases = (f"{short} {facet}",) if short and rng.random() < 0.5 else ()
                plan(topic, f"{subject} {facet}", aliases, words)
    every_word = sorted({w for spec in TOPICS.values() for w in spec["words"]})
    for person in PEOPLE:
        first = person.split()[0]
        plan("People", person, (first,) if rng.random() < 0.7 else (), every_word)
    for project in PROJECTS:
        plan("Projects", project, (SHORT[project],) if project in SHORT else (), every_word)
        plan("Projects", f"{project} retrospective", (), every_word)
    for book in BOOKS:
        plan(
            "Books",
            f"Book - {book.replace(',', '')}",
            (book, SHORT[book]) if book in SHORT else (book,),
            every_word,
        )
    for place in PLACES:
        year = rng.choice([2021, 2022, 2023, 2024])
        plan("Travel", f"{place} trip {year}", (place,) if rng.random() < 0.6 else (), every_word)
    for i in range(30):
        day = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        plan("Daily", day, (), every_word)
        if i % 3 == 0:
            who = rng.choice(PEOPLE).split()[0]
            plan("Meetings", f"{day} 1-1 with {who}", (), every_word)

    names = [p[1] for p in plans]
    own = _own_words(random.Random(f"{seed}/own"), plans) if links == "text" else {}
    notes: list[GenNote] = []
    for folder, name, aliases, words in plans:
        if links == "text":
            body = _text_body(rng, name, folder, words, own, plans)
        else:
            body = _body(rng, name, words, names, hub=name.endswith(" MOC"), folder=folder, all_plans=plans)
        fm = ["---", f"tags: [{folder.lower()}]"]
        if aliases:
            fm.append("aliases:")
            fm.extend(f'  - "{a}"' for a in aliases)
        fm.append("---")
        heading = f"# {name}\n\n" if rng.random() < 0.5 else ""
        safe = name.replace("/", "-")
        notes.append(GenNote(f"{folder}/{safe}.md", name, aliases, "\n".join(fm) + "\n" + heading + body))
    return notes


def _body(
    rng: random.Random,
    name: str,
    words: list[str],
    names: list[str],
    hub: bool,
    folder: str,
    all_plans: list[tuple[str, str, tuple[str, ...], list[str]]],
) -> str:
    if hub:
        members = [p[1] for p in all_plans if p[0] == folder and p[1] != name]
        lines = [f"Everything about {folder.lower()} in one place.", ""]
        lines += [f"- [[{m}]] — {' '.join(rng.sample(words, 3))}" for m in members]
        return "\n".join(lines) + "\n"

    def sentence() -> str:
        ws = rng.sample(words, min(len(words), rng.randint(5, 9)))
        sent = f"{rng.choice(FILLER)} {' '.join(ws)}."
        if rng.random() < 0.35:
            other = rng.choice(names)
            if other != name:
                sent += (
                    f" See [[{other}]]."
                    if rng.random() < 0.7
                    else f" See [{other.lower()}]({other.replace(' ', '%20')}.md)."
                )
        return sent

    return _sections(rng, name, sentence)


def _sections(rng: random.Random, name: str, sentence: Callable[[], str]) -> str:
    """A body of one to three sections of two to five sentences from `sentence`, each section after
    the first under a heading; now and then a sentence names the note's own subject again (people
    mention it in its text, and in other notes' text)."""
    sections = []
    for s in range(rng.randint(1, 3)):
        sents = []
        for _ in range(rng.randint(2, 5)):
            sent = sentence()
            if rng.random() < 0.15:
                sent += f" {name.split(' - ')[-1]} again."
            sents.append(sent)
        head = (
            f"## {rng.choice(['Notes', 'Details', 'Open questions', 'Log', 'Summary', 'Steps'])}\n\n"
            if s
            else ""
        )
        sections.append(head + " ".join(sents))
    return "\n\n".join(sections) + "\n"


def _own_words(
    rng: random.Random, plans: list[tuple[str, str, tuple[str, ...], list[str]]]
) -> dict[str, list[str]]:
    """Each note's own words: its subject's (shared by the subject's facet notes) and a few of its own."""
    subject_words: dict[str, list[str]] = {}
    out: dict[str, list[str]] = {}
    subjects = {s: t for t, spec in TOPICS.items() for s in spec["subjects"]}
    for _folder, name, _aliases, words in plans:
        subject = next((s for s in subjects if name == s or name.startswith(s + " ")), None)
        if subject is not None and subject not in subject_words:
            subject_words[subject] = rng.sample(words, 4)
        base = subject_words.get(subject, []) if subject is not None else []
        mine = rng.sample([w for w in words if w not in base], 6 - len(base) if base else 5)
        out[name] = base + mine
        named = [w for w in _name_words(name) if w not in out[name]]
        if named:
            out[name] = [rng.choice(named), *out[name]]
    return out


#: Words of a name that say nothing about the note (function words, the "Book - " prefix).
_NAME_STOP = frozenset("a an and the of to in on for with how book".split())


def _name_words(name: str) -> list[str]:
    """The words of a note's name a person writes when writing about it (lower-case, no function words)."""
    words = name.split(" - ")[-1].replace(",", " ").split()
    return [w.lower() for w in words if any(c.isalpha() for c in w) and w.lower() not in _NAME_STOP]


def _text_body(
    rng: random.Random,
    name: str,
    folder: str,
    words: list[str],
    own: dict[str, list[str]],
    plans: list[tuple[str, str, tuple[str, ...], list[str]]],
) -> str:
    """A body whose links follow the text (see the module's `text` links)."""
    mine = own[name]
    same = [p[1] for p in plans if p[0] == folder and p[1] != name]
    others = [p[1] for p in plans if p[1] != name]
    topic_words = {p[1]: p[3] for p in plans}

    def about(focus: list[str], n: int, vocabulary: list[str]) -> list[str]:
        # Half or more of a sentence's words are the note's own, the rest its topic's.
        k = min(len(focus), max(2, (n + 1) // 2))
        picked = rng.sample(focus, k)
        rest = [w for w in vocabulary if w not in picked]
        return picked + rng.sample(rest, n - k)

    def link(target: str) -> str:
        if rng.random() < 0.7:
            return f"[[{target}]]"
        return f"[{target.lower()}]({target.replace(' ', '%20')}.md)"

    if name.endswith(" MOC"):
        lines = [f"Everything about {folder.lower()} in one place.", ""]
        lines += [f"- {link(m)} — {' '.join(rng.sample(own[m], 3))}" for m in same]
        return "\n".join(lines) + "\n"

    def sentence() -> str:
        n = rng.randint(5, 9)
        if rng.random() < 0.35:
            target = rng.choice(same if same and rng.random() < 0.6 else others)
            theirs = about(own[target], n, topic_words[target])
            rng.shuffle(theirs)
            cut = rng.randint(2, len(theirs) - 2)
            form = rng.random()
            if form < 0.4:
                return f"{rng.choice(FILLER)} {' '.join(theirs[:cut])}, as in {link(target)}, {' '.join(theirs[cut:])}."
            if form < 0.7:
                return f"{rng.choice(FILLER)} {' '.join(theirs)} (see {link(target)})."
            return f"{link(target)}: {' '.join(theirs)}."
        ws = about(mine, n, words)
        rng.shuffle(ws)
        return f"{rng.choice(FILLER)} {' '.join(ws)}."

    return _sections(rng, name, sentence)


def write(vault: Path, seed: int = 7, links: str = "random") -> list[GenNote]:
    """Write the vault under `vault` (only files whose content differs); returns its notes."""
    notes = generate(seed, links=links)
    vault.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for note in notes:
        path = vault / note.path
        wanted.add(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.read_text(encoding="utf-8") == note.text:
                continue
        except OSError:
            pass
        path.write_text(note.text, encoding="utf-8")
    for stale in vault.rglob("*.md"):
        if stale not in wanted and ".explorer" not in stale.parts:
            stale.unlink()
    return notes
