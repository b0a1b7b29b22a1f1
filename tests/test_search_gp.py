"""The gp sampler: only untried valid points, seeded, learns a space's shape, and learns from other kernels."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import optuna
import pytest
import search_util as helpers
from optuna.trial import TrialState

from luminal.codegen.backend import Knob
from luminal.codegen.partition import partition
from luminal.search.costmodel import Encoding, fit
from luminal.search.samplers import ENUMERATE_LIMIT, RHO, WIDEN_AFTER, ModelSampler, make_sampler
from luminal.search.space import FusionSpace, ScheduleSpace, schedule_key
from luminal.search.tuner import tune

optuna.logging.set_verbosity(optuna.logging.ERROR)


class Grid(helpers.FakeBackend):
    """Two ordered knobs and a categorical one; a block size of 256 with unroll 8 does not fit."""

    def space(self, kernel):
        return [Knob("block", (16, 32, 64, 128, 256, 512)), Knob("unroll", (1, 2, 4, 8)),
                Knob("order", ("mn", "nm"))]

    def default_schedule(self, kernel):
        return {"block": 16, "unroll": 1, "order": "mn"}

    def valid(self, kernel, s):
        return not (s["block"] >= 256 and s["unroll"] == 8)


def _space():
    return ScheduleSpace(Grid(), partition(helpers.small_graph())[0])


def _time(s, best=(128, 4, "nm")):
    """A smooth cost with one optimum; ``best`` moves it."""
    b, u, o = best
    return 100.0 * (1 + 0.3 * abs(s["block"].bit_length() - b.bit_length()) + 0.2 * abs(
        s["unroll"].bit_length() - u.bit_length()) + 0.5 * (s["order"] != o))


def _search(sampler, space, n, storage=None, best=(128, 4, "nm"), name=None):
    study = optuna.create_study(sampler=sampler, storage=storage, study_name=name)
    study.enqueue_trial(space.encode(space.default))
    points = []
    for _ in range(n):
        trial = study.ask()
        s = space.suggest(trial)
        points.append(s)
        study.tell(trial, _time(s, best))
    return study, points


def _to_optimum(points, best=(128, 4, "nm")):
    target = min(_time(p, best) for p in points)
    return next(i + 1 for i, p in enumerate(points) if _time(p, best) == target)


def test_only_untried_valid_points_until_the_space_is_covered():
    space = _space()
    valid = [s for s in map(space.decode, _combos(space)) if space.valid(s)]
    assert len(valid) == 44
    _, points = _search(ModelSampler(space, 0), space, len(valid))
    keys = [schedule_key(p) for p in points]
    assert len(set(keys)) == len(valid) and all(space.valid(p) for p in points)


def _combos(space):
    grid = space.grid()
    return [dict(zip(grid, c)) for c in itertools.product(*grid.values())]


class Big(Grid):
    """A space too big to list: the sampler ranks a seeded random sample of its points."""

    def space(self, kernel):
        return [Knob("block", tuple(2 ** i for i in range(4, 13))), Knob("unroll", (1, 2, 4, 8, 16, 32, 64, 128)),
                Knob("order", tuple(f"o{i}" for i in range(8))), Knob("split", tuple(range(1, 9)))]

    def default_schedule(self, kernel):
        return {"block": 16, "unroll": 1, "order": "o1", "split": 1}

    def valid(self, kernel, s):
        return True


def test_seed_makes_it_reproducible():
    for space in (_space(), ScheduleSpace(Big(), partition(helpers.small_graph())[0])):
        runs = [_search(ModelSampler(space, 7), space, 10)[1] for _ in range(2)]
        assert runs[0] == runs[1]
    # where the space is sampled (or points tie), the seed decides
    assert space.size > ENUMERATE_LIMIT
    assert _search(ModelSampler(space, 8), space, 10)[1] != runs[0]


def test_it_finds_the_optimum_of_a_smooth_space_sooner_than_random():
    space = _space()
    gp = [_to_optimum(_search(ModelSampler(space, s), space, 44)[1]) for s in range(8)]
    rnd = [_to_optimum(_search(optuna.samplers.RandomSampler(seed=s), space, 80)[1]) for s in range(8)]
    assert statistics.mean(gp) < 0.6 * statistics.mean(rnd), (gp, rnd)


@pytest.mark.parametrize("rdb", [False, True])
def test_it_learns_from_another_kernel_in_the_same_storage(tmp_path, rdb):
    space = _space()
    storage = f"sqlite:///{tmp_path / 'studies.db'}" if rdb else optuna.storages.InMemoryStorage()
    best = (64, 2, "nm")
    _search(ModelSampler(space, 0), space, 30, storage, best, "other")
    # a new kernel whose times are the other's, slower: its first model pick is the other's best
    alone = [_to_optimum(_search(ModelSampler(space, s), space, 44, None, best)[1], best) for s in range(4)]
    helped = [_to_optimum(_search(ModelSampler(space, s), space, 44, storage, best, f"k{s}")[1], best)
              for s in range(4)]
    assert max(helped) <= 3 and statistics.mean(helped) < statistics.mean(alone), (helped, alone)
    other = optuna.load_study(study_name="other", storage=storage)
    assert other.user_attrs["luminal_space"] == [space.signature, space.described]


class Wider(Grid):
    """Grid's knobs with more block sizes, as a kernel of another shape may offer."""

    def space(self, kernel):
        return [Knob("block", (8, 16, 32, 64, 128, 256, 512, 1024)), Knob("unroll", (1, 2, 4, 8)),
                Knob("order", ("mn", "nm"))]


def test_it_learns_from_a_kernel_whose_space_offers_other_choices():
    storage = optuna.storages.InMemoryStorage()
    best = (64, 2, "nm")
    _search(ModelSampler(_space(), 0), _space(), 30, storage, best, "other")
    wider = ScheduleSpace(Wider(), partition(helpers.small_graph())[0])
    assert wider.signature == _space().signature and wider.described != _space().described
    alone = [_to_optimum(_search(ModelSampler(wider, s), wider, 60, None, best)[1], best) for s in range(4)]
    helped = [_to_optimum(_search(ModelSampler(wider, s), wider, 60, storage, best, f"k{s}")[1], best)
              for s in range(4)]
    assert max(helped) <= 3 and statistics.mean(helped) < statistics.mean(alone), (helped, alone)


def test_a_knob_value_from_another_space_is_placed_on_this_ones_scale():
    block, order = _space().params[0], _space().params[2]
    assert block.feature(64) == block.position(block.encode(64))
    assert block.feature(1024) > block.feature(512) == 1.0 and block.feature(8) < 0.0 == block.feature(16)
    assert order.feature("nm") == 1.0 and order.feature("km") == -1.0
    assert block.feature(True) is None and block.feature("big") is None


def test_a_pruned_point_is_not_proposed_again():
    space = _space()
    study = optuna.create_study(sampler=ModelSampler(space, 0))
    seen = []
    for _ in range(12):
        trial = study.ask()
        s = space.suggest(trial)
        seen.append(schedule_key(s))
        study.tell(trial, state=TrialState.PRUNED)
    assert len(set(seen)) == 12


def test_fusion_decisions_fall_back_to_tpe():
    s, note = make_sampler("gp", 0, FusionSpace([(0, 1, 0)]), "fusion")
    assert isinstance(s, optuna.samplers.TPESampler) and note is None
    s, _ = make_sampler("gp", 0, _space(), "k")
    assert isinstance(s, ModelSampler)


def test_tune_with_gp_finds_the_fastest_schedule(tmp_path):
    backend = helpers.FakeBackend(modes=("ok", "bad"), speeds=(1, 2, 4, 8), virtual=True)
    report = tune(helpers.small_graph(), backend, 8, cache=tmp_path / "tuning.db",
                  storage=f"sqlite:///{tmp_path / 'studies.db'}", sampler="gp", workers=1, fusion=False,
                  timeout_s=0.5, plan=helpers.PLAN)
    (k,) = report.kernels
    assert k.best_config == {"speed": 1, "mode": "ok"}
    assert not any("using tpe" in n for n in report.notes)  # the sampler did not fall back


class Unrolled(Grid):
    """The unroll knob only matters for blocks of 64 and more: below, the generated code is the same."""

    def identity(self, kernel, s):
        return repr((s["block"], s["unroll"] if s["block"] >= 64 else 1, s["order"]))


def test_points_that_run_the_same_code_are_proposed_once():
    space = ScheduleSpace(Unrolled(), partition(helpers.small_graph())[0])
    valid = [s for s in map(space.decode, _combos(space)) if space.valid(s)]
    classes = {space.key(s) for s in valid}
    assert len(classes) == 32 < len(valid)
    _, points = _search(ModelSampler(space, 0), space, len(classes))
    assert len({space.key(p) for p in points}) == len(classes)


def test_the_tuner_times_one_point_per_class(tmp_path):
    class OneSpeed(helpers.FakeBackend):
        def identity(self, kernel, s):  # the mode knob changes nothing that runs
            return repr(s["speed"])

    backend = OneSpeed(modes=("ok", "ok2"), speeds=(1, 2, 4, 8))
    report = tune(helpers.small_graph(), backend, 8, cache=tmp_path / "tuning.db",
                  storage=f"sqlite:///{tmp_path / 'studies.db'}", sampler="gp", workers=1, fusion=False,
                  timeout_s=0.5, plan=helpers.PLAN)
    for k in report.kernels:
        assert k.trials <= 4, k


def test_expected_improvement_points_down_the_slope():
    enc = Encoding(np.array([True]))
    x = np.array([[0.0], [0.25], [0.5]])
    model = fit(enc, x, np.log([300.0, 200.0, 150.0]), [], RHO)
    gain = model.expected_improvement(np.array([[0.1], [0.4], [0.75], [1.0]]))
    assert (gain >= 0).all()
    assert np.argmax(gain) >= 2 and gain[0] < gain[1] < gain[2], gain


def test_a_kernel_learns_from_trials_another_made_after_it_began():
    """A tuning run interleaves its kernels: what the others learnt since a kernel's last trial counts."""
    space = _space()
    best = (64, 2, "nm")
    optimum = dict(zip(("block", "unroll", "order"), best))
    storage = optuna.storages.InMemoryStorage()
    first = optuna.create_study(sampler=ModelSampler(space, 0), storage=storage, study_name="first")
    first.enqueue_trial(space.encode(space.default))
    seen = []

    def trials(n):
        for _ in range(n):
            trial = first.ask()
            seen.append(space.suggest(trial))
            first.tell(trial, _time(seen[-1], best))

    trials(2)  # the default, then a proposal made while the other kernel has no trials
    _search(ModelSampler(space, 1), space, 30, storage, best, "other")
    trials(2)
    # the other kernel's best, which its own two trials had not found
    assert optimum not in seen[:2] and optimum in seen[2:], seen


def test_the_model_reads_a_knobs_order_where_the_times_follow_it():
    enc = Encoding(np.array([True]))
    x = np.linspace(0, 1, 7)[:, None]
    smooth = fit(enc, x, np.log(100 + 80 * x[:, 0]), [], RHO)
    zigzag = fit(enc, x, np.log([150.0, 100.0, 160.0, 110.0, 170.0, 120.0, 180.0]), [], RHO)
    for m in (smooth, zigzag):
        assert len(m.fits) > 1 and np.isclose(m.weights.sum(), 1.0)
    ordered = lambda m: sum(w for w, f in zip(m.weights, m.fits) if f.ordered)
    assert ordered(smooth) > 0.5 > ordered(zigzag), (ordered(smooth), ordered(zigzag))


@pytest.mark.parametrize("big", [False, True])
def test_it_changes_one_knob_of_the_best_point_at_a_time_and_more_when_stuck(big):
    """The trust region: while no trial beats the best point, every WIDEN_AFTER trials widen it by a knob."""
    space = ScheduleSpace(Big(), partition(helpers.small_graph())[0]) if big else _space()
    assert (space.size > ENUMERATE_LIMIT) == big
    study = optuna.create_study(sampler=ModelSampler(space, 0))
    study.enqueue_trial(space.encode(space.default))
    changed = []
    for _ in range(1 + 3 * WIDEN_AFTER):
        trial = study.ask()
        s = space.suggest(trial)
        changed.append(sum(s[k] != v for k, v in space.default.items()))
        study.tell(trial, 110.0 if changed[-1] else 100.0)  # the default stays the best
    steps = [changed[1 + i * WIDEN_AFTER:1 + (i + 1) * WIDEN_AFTER] for i in range(3)]
    assert steps[0] == [1] * WIDEN_AFTER and max(steps[1]) <= 2 and max(steps[2]) == 3, changed
    # a new best moves the region: the next point is one knob from it
    trial = study.ask()
    s = space.suggest(trial)
    study.tell(trial, 1.0)
    trial = study.ask()
    assert sum(a != b for a, b in zip(space.suggest(trial).values(), s.values())) == 1


def _kernels(storage, k: int, trials: int = 6) -> None:
    """``k`` kernel studies of one device and toolchain in ``storage``, each with ``trials`` timed points."""
    from luminal.search.samplers import SPACE_ATTR
    from luminal.search.studies import open_study

    space = _space()
    for i in range(k):
        study = open_study(storage, f"luminal-kernel-k{i}-dev-tc", optuna.samplers.RandomSampler(seed=i),
                           {SPACE_ATTR: [space.signature, space.described]})
        for _ in range(trials):
            trial = study.ask()
            study.tell(trial, _time(space.suggest(trial)))


@pytest.mark.parametrize("kernels", [2, 12])
def test_the_shared_transfer_reads_what_each_sampler_would_in_queries_that_do_not_grow_with_the_kernels(
        tmp_path, kernels):
    from sqlalchemy import event

    from luminal.search.samplers import SPACE_ATTR, Transfer
    from luminal.search.studies import open_storage, open_study

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    _kernels(storage, kernels)
    space = _space()
    other_device = open_study(storage, "luminal-kernel-x-otherdev-tc", optuna.samplers.RandomSampler(seed=0),
                              {SPACE_ATTR: [space.signature, space.described]})
    for _ in range(3):
        trial = other_device.ask()
        other_device.tell(trial, _time(space.suggest(trial)))
    mine = open_study(storage, "luminal-kernel-mine-dev-tc", ModelSampler(space, 0))
    shared = ModelSampler(space, 0, shared=Transfer(storage, "-dev-tc"))
    alone = ModelSampler(space, 0)
    # the same points and times as a sampler that reads every study itself, but for the other device's
    got = shared._other_kernels(mine)
    want = alone._other_kernels(mine)
    assert len(got) == kernels and len(want) == kernels + 1
    for (gx, gy), (wx, wy) in zip(got, want):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)
    # a refresh after one more trial of one kernel: a fixed number of queries, whatever the number of kernels
    queries = []
    event.listen(storage.rdb.engine, "before_cursor_execute", lambda *a: queries.append(a[2]))
    _kernels(storage, 1, trials=1)
    queries.clear()
    assert sum(len(y) for _, y in shared._other_kernels(mine)) == kernels * 6 + 1
    assert len(queries) <= 3, queries
