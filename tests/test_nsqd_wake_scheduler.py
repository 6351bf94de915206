"""nsqd's one-task deadline scheduler (nsqd/wake_scheduler.py) under trio's MockClock: each of its
timing rules at its exact virtual time (pytest-trio's ``autojump_clock`` jumps to the next deadline
whenever every task waits, so no test waits for a real second)."""

import gc
import math
import weakref

import pytest
import trio

from nsqd.wake_scheduler import WakeScheduler


class Key:
    """Something to wake (a connection or a channel in nsqd), named for the assertions."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class Recorder:
    """A scheduler's owner: records each round as (virtual time, the keys' names)."""

    def __init__(self, slack: float = 0.0, most: float = math.inf):
        self.scheduler = WakeScheduler(self.due, slack, most)
        self.rounds: list[tuple[float, list[str]]] = []
        self.then = None  # called with (keys, now) after each round is recorded

    def due(self, keys: list, now: float) -> None:
        assert now == trio.current_time()
        self.rounds.append((round(now, 6), [key.name for key in keys]))
        if self.then is not None:
            self.then(keys, now)


@pytest.fixture
async def recorder(nursery) -> Recorder:
    recorder = Recorder()
    nursery.start_soon(recorder.scheduler.run)
    return recorder


@pytest.fixture
async def slack_recorder(nursery) -> Recorder:
    recorder = Recorder(slack=0.1)
    nursery.start_soon(recorder.scheduler.run)
    return recorder


async def test_a_key_is_handed_over_exactly_at_its_deadline(autojump_clock, recorder):
    start = trio.current_time()
    recorder.scheduler.wake_at(Key("a"), start + 1.5)
    recorder.scheduler.wake_at(Key("b"), start + 0.5)
    await trio.sleep(1.4999)
    assert recorder.rounds == [(round(start + 0.5, 6), ["b"])]
    await trio.sleep(1)
    assert recorder.rounds[1:] == [(round(start + 1.5, 6), ["a"])]


async def test_keys_due_together_come_in_one_round_in_deadline_order_ties_as_asked(autojump_clock, recorder):
    start = trio.current_time()
    for name, delay in (("late", 2.0), ("tie1", 1.0), ("tie2", 1.0), ("early", 0.5)):
        recorder.scheduler.wake_at(Key(name), start + delay)
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 0.5, 6), ["early"]), (round(start + 1.0, 6), ["tie1", "tie2"]),
                               (round(start + 2.0, 6), ["late"])]

    recorder.rounds.clear()
    now = trio.current_time()
    for name in ("x", "y", "z"):
        recorder.scheduler.wake_at(Key(name), now)  # due already: handed over at once
    await trio.sleep(0.1)
    assert recorder.rounds == [(round(now, 6), ["x", "y", "z"])]


async def test_slack_hands_over_keys_due_that_soon_after_the_earliest_never_sooner(autojump_clock, slack_recorder):
    start = trio.current_time()
    for name, delay in (("first", 1.0), ("within", 1.1), ("beyond", 1.1001), ("its_own", 2.0)):
        slack_recorder.scheduler.wake_at(Key(name), start + delay)
    await trio.sleep(3)
    assert slack_recorder.rounds == [(round(start + 1.0, 6), ["first", "within"]),
                                     (round(start + 1.1001, 6), ["beyond"]),
                                     (round(start + 2.0, 6), ["its_own"])]


async def test_a_round_hands_over_at_most_most_keys_the_rest_after_a_checkpoint(autojump_clock, nursery):
    recorder = Recorder(slack=0.1, most=2)
    nursery.start_soon(recorder.scheduler.run)
    start = trio.current_time()
    keys = {name: Key(name) for name in ("a", "b", "gone", "c", "d", "e", "later")}
    for name, delay in (("a", 1.0), ("b", 1.0), ("gone", 1.0), ("c", 1.05), ("d", 1.08), ("e", 1.08), ("later", 1.2)):
        recorder.scheduler.wake_at(keys[name], start + delay)
    recorder.scheduler.forget(keys["gone"])  # a forgotten key takes no place in a round
    runs = []  # the rounds and another task's turns, in the order they came

    async def other_task() -> None:
        await trio.sleep_until(start + 1.0)
        for _ in range(6):
            runs.append("other")
            await trio.lowlevel.checkpoint()

    recorder.then = lambda keys, now: runs.append([key.name for key in keys])
    nursery.start_soon(other_task)
    await trio.sleep(3)
    assert recorder.rounds == [(round(start + 1.0, 6), ["a", "b"]), (round(start + 1.0, 6), ["c", "d"]),
                               (round(start + 1.0, 6), ["e"]), (round(start + 1.2, 6), ["later"])]
    # trio runs each ready task once per batch, in an order of its choosing, so the other task
    # may come before or after the round of its batch; never three rounds in a row, as the
    # three rounds due at 1.0 would come without the scheduler's checkpoint
    rounds_in_a_row = 0
    for taken in runs[:runs.index(["later"])]:
        rounds_in_a_row = rounds_in_a_row + 1 if isinstance(taken, list) else 0
        assert rounds_in_a_row <= 2, runs


async def test_a_key_asked_again_keeps_the_sooner_wake_up(autojump_clock, recorder):
    start = trio.current_time()
    key = Key("k")
    recorder.scheduler.wake_at(key, start + 2.0)
    recorder.scheduler.wake_at(key, start + 3.0)  # later: kept at 2.0
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 2.0, 6), ["k"])]  # once: never at 3.0

    recorder.rounds.clear()
    start = trio.current_time()
    recorder.scheduler.wake_at(key, start + 2.0)
    await trio.sleep(1.0)
    recorder.scheduler.wake_at(key, start + 1.5)  # sooner, while the task sleeps until 2.0
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 1.5, 6), ["k"])]  # once: the 2.0 entry went stale


async def test_a_forgotten_key_is_never_handed_over_and_is_freed_at_once(autojump_clock, recorder):
    start = trio.current_time()
    key, other = Key("gone"), Key("other")
    recorder.scheduler.wake_at(key, start + 1.0)
    recorder.scheduler.wake_at(other, start + 2.0)
    recorder.scheduler.forget(key)
    recorder.scheduler.forget(Key("never asked"))  # harmless
    freed = weakref.ref(key)
    del key
    gc.collect()
    assert freed() is None  # while its stale entry is still in the heap
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 2.0, 6), ["other"])]


async def test_a_key_handed_over_is_woken_again_only_when_asked_again(autojump_clock, recorder):
    start = trio.current_time()
    ticks = {"tick": 0}

    def again(keys, now):
        for key in keys:
            ticks[key.name] += 1
            if ticks[key.name] < 3:
                recorder.scheduler.wake_at(key, now + 0.75)  # from the round, as the heartbeats do

    recorder.then = again
    recorder.scheduler.wake_at(Key("tick"), start + 0.5)
    await trio.sleep(10)
    assert recorder.rounds == [(round(start + t, 6), ["tick"]) for t in (0.5, 1.25, 2.0)]


async def test_an_idle_scheduler_sleeps_until_asked(autojump_clock, recorder):
    await trio.sleep(100)
    assert recorder.rounds == []
    start = trio.current_time()
    recorder.scheduler.wake_at(Key("late"), start + 0.25)
    await trio.sleep(1)
    assert recorder.rounds == [(round(start + 0.25, 6), ["late"])]


async def test_keys_sharing_a_deadline_each_come_once_even_after_a_forget_and_a_second_ask(autojump_clock, recorder):
    start = trio.current_time()
    again, gone, other = Key("again"), Key("gone"), Key("other")
    for key in (again, gone, other):
        recorder.scheduler.wake_at(key, start + 1.0)
    recorder.scheduler.forget(again)
    recorder.scheduler.forget(gone)
    recorder.scheduler.wake_at(again, start + 1.0)  # the same deadline, asked anew: after "other"
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 1.0, 6), ["other", "again"])]


async def test_keys_asked_together_join_those_due_then_and_come_again_whole(autojump_clock, recorder):
    start = trio.current_time()
    first, keys = Key("first"), [Key(name) for name in ("a", "b", "c")]
    recorder.scheduler.wake_at(first, start + 0.5)
    recorder.scheduler.wake_all_at(keys, start + 0.5)  # none has a wake-up: after "first", in the order given
    rounds = []

    def again(due, now):  # each round asks its keys again at once, as the heartbeats do
        rounds.append(now)
        if len(rounds) < 3:
            recorder.scheduler.wake_all_at(due, now + 0.75)

    recorder.then = again
    await trio.sleep(1.0)
    recorder.scheduler.forget(keys[1])  # between the rounds: gone from the next, and freed at once
    freed = weakref.ref(keys.pop(1))
    gc.collect()
    assert freed() is None
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 0.5, 6), ["first", "a", "b", "c"]),
                               (round(start + 1.25, 6), ["first", "a", "c"]),
                               (round(start + 2.0, 6), ["first", "a", "c"])]


async def test_keys_asked_together_keep_each_key_s_sooner_wake_up(autojump_clock, recorder):
    start = trio.current_time()
    sooner, later, alone = Key("sooner"), Key("later"), Key("alone")
    recorder.scheduler.wake_at(sooner, start + 0.5)
    recorder.scheduler.wake_all_at([later, sooner], start + 1.0)  # "sooner" keeps 0.5, and comes once
    recorder.scheduler.wake_all_at([alone], start + 0.25)
    recorder.scheduler.wake_all_at([alone], start + 2.0)  # later than its wake-up: kept at 0.25
    await trio.sleep(5)
    assert recorder.rounds == [(round(start + 0.25, 6), ["alone"]), (round(start + 0.5, 6), ["sooner"]),
                               (round(start + 1.0, 6), ["later"])]


async def test_the_task_stops_when_cancelled_while_it_sleeps_even_at_its_deadline(autojump_clock):
    for cancel_after in (0.5, 1.0):  # before the earliest deadline, and at it
        recorder = Recorder()
        start = trio.current_time()
        recorder.scheduler.wake_at(Key("a"), start + 1.0)
        recorder.scheduler.wake_at(Key("b"), start + 2.0)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(recorder.scheduler.run)
                await trio.sleep(cancel_after)
                nursery.cancel_scope.cancel()
        assert trio.current_time() == start + cancel_after  # it stopped at once
        assert recorder.rounds == ([] if cancel_after < 1.0 else [(round(start + 1.0, 6), ["a"])])
