"""Spell whole numbers out in English words, the way the transcripts (and espeak-ng) say them."""

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spell_integer(n: int) -> str:
    """0 <= n < 1,000,000 -> words without "and" or hyphens: 342 -> "three hundred forty two"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"n must be in [0, 1000000), got {n}")
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    if n < 1000:
        return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + spell_integer(n % 100))
    return spell_integer(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " " + spell_integer(n % 1000))


def spell_digits(digits: str) -> str:
    """"4021" -> "four zero two one" (account numbers, codes)."""
    return " ".join(ONES[int(d)] for d in digits)
