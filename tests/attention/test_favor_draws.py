"""FAVOR+'s feature draws are pinned (issue 58 item 8): draw i of seed s comes from its own stream
(`_rng.generator("favor.draw<i>", s)`), so a redraw of one seed never repeats another seed's draw (as `seed + index`
would: redraw 1 of seed 5 = draw 0 of seed 6), and the recorded runs' draws stay what they were."""

from __future__ import annotations

import pytest
import torch

from symformer.attention import FavorAttention

# FavorAttention(head_dim=4, n_features=3, seed=s): draw 0 and draw 1 (after one redraw), row-major, float32
GOLDEN = {
    (0, 0): [-0.6891711354255676, -0.22253388166427612, -1.1240030527114868, -0.5938072800636292, 0.124457448720932,
             -1.6664353609085083, -0.4565381109714508, 1.3442342281341553, -2.068197250366211, 0.3987675607204437,
             0.7010377049446106, 0.9239262938499451],
    (0, 1): [0.9354227185249329, 0.1652095466852188, -1.5932936668395996, 1.1100016832351685, -1.1627236604690552,
             -0.5445190668106079, -0.1195870190858841, 0.8892425298690796, -0.4333975315093994, 0.29847708344459534,
             -0.5417152643203735, -0.45676761865615845],
    (5, 0): [-1.2095341682434082, 0.6071174144744873, 0.9378103017807007, 1.7765426635742188, 2.0759060382843018,
             0.956457793712616, -0.7855148315429688, 1.5011521577835083, -0.48690128326416016, 2.498230457305908,
             -0.2538396120071411, -1.0512495040893555],
    (5, 1): [-0.8082405924797058, 1.3026726245880127, -1.9728177785873413, 0.5856047868728638, 1.1365509033203125,
             1.2573639154434204, 0.27322977781295776, -0.30787739157676697, -0.0592716820538044, 0.1443208009004593,
             0.31169724464416504, 0.6472169756889343],
}  # fmt: skip


def draw(seed: int, index: int) -> torch.Tensor:
    m = FavorAttention(4, n_features=3, seed=seed)
    for _ in range(index):
        m.redraw()
    return m.features.clone()


@pytest.mark.parametrize("seed,index", list(GOLDEN))
def test_draws_are_pinned(seed, index):
    got = draw(seed, index)
    assert got.dtype == torch.float32 and got.shape == (3, 4)
    assert torch.equal(got.flatten(), torch.tensor(GOLDEN[seed, index], dtype=torch.float32))


def test_a_redraw_never_repeats_another_seeds_draw():
    assert not torch.equal(draw(5, 1), draw(6, 0))  # seed + index would make them equal
    assert not torch.equal(draw(5, 2), draw(6, 1)) and not torch.equal(draw(5, 2), draw(7, 0))
    draws = {(s, i): draw(s, i) for s in range(4) for i in range(3)}
    keys = list(draws)
    assert all(not torch.equal(draws[a], draws[b]) for j, a in enumerate(keys) for b in keys[j + 1 :])


def test_reseed_restarts_the_sequence():
    m = FavorAttention(4, n_features=3, seed=5)
    m.redraw()
    m.reseed(6)
    assert torch.equal(m.features, draw(6, 0))
    m.redraw()
    assert torch.equal(m.features, draw(6, 1))
