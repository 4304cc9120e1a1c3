"""Writes odd_unicode.txt: pydocs_small.txt sentences with odd Unicode put in, for the golden test.

  python tests/support/make_odd_unicode.py   # deterministic (seeded); rewrites the file

Each line of the first documents of pydocs_small.txt gets a few insertions inside and between
words: private use (Co) and unassigned (Cn) characters, format characters (Cf: zero-width space and
joiners, soft hyphen, BOM), control characters (Cc), U+FFFD, combining marks, CJK and other scripts,
fullwidth forms, mixed-script words, emoji sequences and mojibake ("Ã©"). Some whole lines are made
of characters the tokenizer deletes, so sentences vanish. No "\\r" and no invalid UTF-8: the
original's reader (TensorFlow's GFile) drops the first and fails on the second.
"""

import os
import random

# The golden inputs it reads and writes live with the package's other test data.
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data_prep", "testdata")

# By category, in the order the seeded draws index them.
INSERTS = [
    *["\ue000", "\uf8ff", "\U000f0001", "\U00100000", "\uf8ffx\uf8ff"],  # private use
    *["\u0378", "\ufdd0", "\U0003fffe", "\U000e0fff"],  # unassigned
    *["\u200b", "\u200c", "\u200d", "\u200e", "\u2060", "\ufeff", "\u00ad", "\U000e0001"],  # format
    *["\x01", "\x07", "\x7f", "\x9f", "\x0b", "\x0c", "\x1c", "\x85"],  # control
    *["\ufffd", "\u00a0", "\u3000", "\u2009", "\u2028", "\u2029"],  # replacement char, spaces
    *["e\u0301", "a\u0308", "\u0301", "n\u0303o"],  # combining marks
    *["中文字符", "日本語のテキスト", "한국어", "\U00020000\U0002a6d6", "\uf900"],  # CJK
    *["क्षि", "ที่"],  # scripts
    *["שָׁלוֹם", "مَرْحَبًا", "ΟΔΟΣ", "Σίσυφος", "İstanbul", "Straße", "ﬁne", "ǅ"],  # scripts, cases
    *["ＡＢＣ１２３！", "ｶﾀｶﾅ", "𝐀𝐁𝐂", "ℌ"],  # fullwidth, halfwidth, math letters
    *["👩\u200d💻", "👍🏽", "🇯🇵"],  # emoji sequences
    *["Ã©", "Ã¨", "â€™", "â€œquotedâ€\x9d", "Ã¼ber", "cafÃ©", "Ã\x83Â©"],  # mojibake
    *["Жx", "pаypаl"],  # mixed scripts (Cyrillic а)
]
WHOLE_LINES = ["\u200b\u200d", "\ufeff", "\x01\x02", "\u00ad \u200b"]


def main():
    rng = random.Random(2024)
    with open(os.path.join(HERE, "pydocs_small.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, documents = [], 0
    for line in lines:
        if not line:
            documents += 1
            if documents == 4:
                break
            out.append("")
            continue
        words = line.split(" ")
        for _ in range(rng.randint(2, 6)):
            i = rng.randrange(len(words))
            insert = rng.choice(INSERTS)
            if rng.random() < 0.5 and words[i]:  # inside a word
                j = rng.randint(0, len(words[i]))
                words[i] = words[i][:j] + insert + words[i][j:]
            else:
                words.insert(i, insert)
        out.append(" ".join(words))
        if rng.random() < 0.05:
            out.append(rng.choice(WHOLE_LINES))
    long_word = "가" * 120 + "é" * 60  # 180 characters; more than 200 after NFD
    out += ["", f"A long word {long_word} and {'x' * 201} end.", "The last sentence."]
    with open(os.path.join(HERE, "odd_unicode.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
