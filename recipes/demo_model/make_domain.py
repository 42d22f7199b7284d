"""Domain text and a domain test set for LM-biasing experiments: banking and phone/device commands.

Sentences are filled from templates with `faker` names and cities and spelled-out numbers. They never
occur in the general training text (checked), so an LM built from the domain text is what teaches the
model the names and phrasing, and the domain test set's greedy WER is the baseline that biasing should
improve. One fixed pool of contacts and cities (like a user's address book) is shared by the LM text and
the test set; the test sentences themselves are never in the LM text.

    python make_domain.py --out /root/loopscribe-data/text
writes domain_text.txt (LM training text), domain_test.txt and domain_contacts.txt.
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from faker import Faker
from numbers_en import spell_digits, spell_integer

ACCOUNTS = ("checking", "savings", "credit card", "joint", "business", "travel")
BILLS = ("electricity", "water", "phone", "internet", "gas", "rent", "insurance")
ROOMS = ("kitchen", "bedroom", "living room", "bathroom", "garage", "office", "hallway")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
PERIODS = ("week", "month", "year")
MESSAGES = ("i am running late", "see you soon", "call me back", "happy birthday", "i will be there in ten minutes",
            "the meeting is moved to tomorrow", "can you pick up some milk", "thank you so much")

TEMPLATES = (
    "transfer {amount} dollars to {name}",
    "send {amount} dollars to {name} from my {account} account",
    "pay {name} {amount} dollars and {cents} cents",
    "move {amount} dollars from my {account} account to my {account2} account",
    "what is the balance of my {account} account",
    "show me the last {small} transactions on my {account} account",
    "pay my {bill} bill of {amount} dollars",
    "schedule a payment of {amount} dollars to {name} on {weekday}",
    "freeze the card ending in {digits}",
    "set up a monthly transfer of {amount} dollars to {name}",
    "how much did i send to {name} last {period}",
    "request {amount} dollars from {name} for dinner",
    "call {name}",
    "call {name} on the mobile",
    "send a message to {name} saying {message}",
    "remind me to call {name} at {hour} o'clock",
    "set an alarm for {hour} {minute} in the morning",
    "set a timer for {small} minutes",
    "turn {onoff} the {room} lights",
    "set the thermostat to {temperature} degrees",
    "navigate to {city}",
    "what is the weather in {city} on {weekday}",
    "book a table for {small} at {hour} in {city}",
    "share my location with {name}",
)


def ascii_words(text: str) -> str | None:
    text = text.lower().replace("-", " ")
    return text if re.fullmatch(r"[a-z ]+", text) else None


def contact_pool(fake: Faker, size: int) -> list[str]:
    names: list[str] = []
    while len(names) < size:
        name = ascii_words(f"{fake.first_name()} {fake.last_name()}")
        if name and name not in names:
            names.append(name)
    return names


def city_pool(fake: Faker, size: int) -> list[str]:
    cities: list[str] = []
    while len(cities) < size:
        city = ascii_words(fake.city())
        if city and city not in cities:
            cities.append(city)
    return cities


def fill(template: str, rng: random.Random, names: list[str], cities: list[str]) -> str:
    account, account2 = rng.sample(ACCOUNTS, 2)
    values = {
        "amount": spell_integer(rng.choice((rng.randint(1, 99), rng.randint(100, 999), rng.randint(1000, 20000)))),
        "cents": spell_integer(rng.randint(1, 99)),
        "name": rng.choice(names),
        "account": account,
        "account2": account2,
        "bill": rng.choice(BILLS),
        "small": spell_integer(rng.randint(2, 12)),
        "weekday": rng.choice(WEEKDAYS),
        "digits": spell_digits(f"{rng.randint(0, 9999):04d}"),
        "period": rng.choice(PERIODS),
        "message": rng.choice(MESSAGES),
        "hour": spell_integer(rng.randint(1, 12)),
        "minute": spell_integer(rng.randint(10, 59)),
        "onoff": rng.choice(("on", "off")),
        "room": rng.choice(ROOMS),
        "temperature": spell_integer(rng.randint(15, 80)),
        "city": rng.choice(cities),
    }
    return template.format(**values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/root/loopscribe-data/text")
    parser.add_argument("--train-text", default="/root/loopscribe-data/text/train.txt")
    parser.add_argument("--lm-sentences", type=int, default=6000)
    parser.add_argument("--test-sentences", type=int, default=300)
    parser.add_argument("--contacts", type=int, default=200)
    parser.add_argument("--cities", type=int, default=60)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()

    fake = Faker("en_US")
    Faker.seed(args.seed)
    names = contact_pool(fake, args.contacts)
    cities = city_pool(fake, args.cities)
    rng = random.Random(args.seed)
    general = set(Path(args.train_text).read_text().splitlines())

    sentences: list[str] = []
    seen: set[str] = set()
    target = args.lm_sentences + args.test_sentences
    while len(sentences) < target:
        sentence = fill(rng.choice(TEMPLATES), rng, names, cities)
        if sentence not in seen and sentence not in general:
            seen.add(sentence)
            sentences.append(sentence)
    test, lm_text = sentences[: args.test_sentences], sentences[args.test_sentences :]

    out = Path(args.out)
    (out / "domain_text.txt").write_text("\n".join(lm_text) + "\n")
    (out / "domain_test.txt").write_text("\n".join(test) + "\n")
    (out / "domain_contacts.txt").write_text("\n".join(names + cities) + "\n")
    general_words = {w for s in general for w in s.split()}
    test_words = {w for s in test for w in s.split()}
    print(f"domain_text {len(lm_text)} sentences, domain_test {len(test)} sentences; "
          f"{len(test_words - general_words)} of {len(test_words)} test words never occur in the training text")


if __name__ == "__main__":
    main()
