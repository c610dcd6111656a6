"""Regenerate ``english.txt``, the small corpus bundled for the RNN language model.

The text comes from a hand-written phrase grammar walked with a fixed seed, so
the file is reproducible and owes nothing to an outside source. Word
frequencies follow the grammar's choices, which gives the skewed, learnable
distribution a language model needs to show its loss falling within a few steps.

    python rnnprof/models/corpus/make_corpus.py > rnnprof/models/corpus/english.txt
"""

from __future__ import annotations

import random
import sys

SENTENCES = 5000

PEOPLE = ["the engineer", "the student", "my neighbour", "the old farmer", "a young doctor",
          "the teacher", "her brother", "his sister", "the captain", "our manager", "the baker",
          "a tired driver", "the small child", "the new clerk", "the pilot", "my friend",
          "the gardener", "the writer", "a quiet musician", "the mayor"]
NAMES = ["anna", "peter", "maria", "james", "lucy", "tom", "sara", "david", "emma", "paul"]
THINGS = ["the letter", "a book", "the old car", "the red door", "a cup of tea", "the report",
          "the map", "a loaf of bread", "the garden gate", "the kitchen window", "a small boat",
          "the train ticket", "the blue coat", "a warm blanket", "the radio", "the bicycle",
          "the heavy box", "a bag of apples", "the clock", "the newspaper"]
PLACES = ["the station", "the market", "the river", "the library", "the village", "the office",
          "the hospital", "the harbour", "the park", "the school", "the bridge", "the hill",
          "the old church", "the city", "the farm", "the beach"]
TIMES = ["in the morning", "at noon", "in the evening", "at night", "on monday", "on friday",
         "last week", "yesterday", "every day", "after lunch", "before dinner", "in the spring",
         "during the winter", "early today"]
VERBS_OBJ = [("opened", "opens"), ("carried", "carries"), ("found", "finds"), ("lost", "loses"),
             ("painted", "paints"), ("repaired", "repairs"), ("bought", "buys"), ("sold", "sells"),
             ("cleaned", "cleans"), ("read", "reads"), ("borrowed", "borrows"), ("wanted", "wants")]
VERBS_MOVE = [("walked", "walks"), ("drove", "drives"), ("ran", "runs"), ("went", "goes"),
              ("travelled", "travels"), ("returned", "returns"), ("hurried", "hurries")]
ADJECTIVES = ["cold", "quiet", "busy", "bright", "empty", "crowded", "wet", "calm", "dark", "warm"]
WEATHER = ["it rained", "the sun was shining", "the wind was strong", "snow was falling",
           "the sky was grey", "the air was still"]
FEELINGS = ["happy", "worried", "surprised", "tired", "pleased", "nervous", "calm", "curious"]
REASONS = ["because it was late", "because the road was closed", "since nobody else could help",
           "because the weather was bad", "so that everyone could see", "as the day was ending"]


def subject(r: random.Random) -> str:
    return r.choice(PEOPLE) if r.random() < 0.7 else r.choice(NAMES)


def clause(r: random.Random) -> str:
    kind = r.random()
    past = r.random() < 0.75
    if kind < 0.35:
        verb = r.choice(VERBS_OBJ)[0 if past else 1]
        text = f"{subject(r)} {verb} {r.choice(THINGS)}"
        if r.random() < 0.5:
            text += f" at {r.choice(PLACES)}"
    elif kind < 0.6:
        verb = r.choice(VERBS_MOVE)[0 if past else 1]
        text = f"{subject(r)} {verb} to {r.choice(PLACES)}"
    elif kind < 0.75:
        text = f"{r.choice(PLACES)} was {r.choice(ADJECTIVES)}" if past else \
            f"{r.choice(PLACES)} is {r.choice(ADJECTIVES)}"
    elif kind < 0.87:
        text = f"{subject(r)} {'was' if past else 'is'} {r.choice(FEELINGS)}"
    else:
        text = r.choice(WEATHER)
    if r.random() < 0.3:
        text = f"{r.choice(TIMES)} , {text}" if r.random() < 0.5 else f"{text} {r.choice(TIMES)}"
    return text


def sentence(r: random.Random) -> str:
    text = clause(r)
    roll = r.random()
    if roll < 0.2:
        text += f" and {clause(r)}"
    elif roll < 0.3:
        text += f" {r.choice(REASONS)}"
    elif roll < 0.38:
        text += f" , but {clause(r)}"
    elif roll < 0.43:
        text = f"when {text} , {clause(r)}"
    return text + " ."


def main() -> None:
    r = random.Random(20240611)
    out = sys.stdout
    for _ in range(SENTENCES):
        out.write(sentence(r) + "\n")


if __name__ == "__main__":
    main()
