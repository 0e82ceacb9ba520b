#!/usr/bin/env python3
"""Writes the letters task family (plugins/task_letters): a one-turn prompt whose answer is graded
by its first character. Deterministic; the committed tasks/letters/*.jsonl are its output."""
import json
import os

SUBJECTS = ["animal", "colour", "city", "tool", "fruit", "river", "planet", "name", "verb", "number",
            "country", "plant", "metal", "bird", "game", "dance"]


def rows(prefix, count, offset):
    out = []
    for i in range(count):
        subject = SUBJECTS[(i + offset) % len(SUBJECTS)]
        out.append({"instance_id": f"letters__{prefix}-{i:04d}",
                    "prompt": f"Question {i + offset}: name a {subject} whose name starts with the letter e. "
                              f"Reply with the word only, no space before it.",
                    "accept": "e"})
    return out


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tasks", "letters")
    os.makedirs(here, exist_ok=True)
    for name, count, offset in (("train", 2048, 0), ("validation", 16, 100000)):
        with open(os.path.join(here, name + ".jsonl"), "w") as f:
            for r in rows(name, count, offset):
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
