"""The generated-screen environments: layout invariants (pure Python), ground truth against the DOM,
checkers proven by an oracle, step verification, and conformance of every registered environment.

One Chromium serves the whole module (a module-scoped event loop owns it); environments get it
through ``device=`` and resize its viewport to their form factor.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from devices.actions import Action, ActionKind, Point
from devices.web import PlaywrightDevice, WebConfig
from envs.conformance import check_env
from envs.errors import ConformanceError, EnvError, LayoutError, UnknownEnv
from envs.wrappers import TimeLimit
from envs.generated import GeneratedEnv
from envs.generated.layout import DIFFICULTIES, FORM_FACTORS, Role, ScreenParams, TaskKind, generate
from envs.generated.phrasing import PHRASINGS, forms
from agent.oracles import GeneratedOracle as OraclePolicy
from envs.registry import all_specs, make

ALL_PARAMS = [
    ScreenParams(kind, difficulty, language, theme, form_factor)
    for kind, difficulty, language, theme, form_factor in itertools.product(
        TaskKind, DIFFICULTIES, ("en", "zh"), ("light", "dark"), FORM_FACTORS
    )
]


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def device(loop):
    dev = PlaywrightDevice(WebConfig())
    loop.run_until_complete(dev.start())
    yield dev
    loop.run_until_complete(dev.close())


@pytest.fixture
def run(loop):
    return loop.run_until_complete


def _click(screen, wid: str) -> Action:
    x1, y1, x2, y2 = screen.norm_box(wid)
    return Action(ActionKind.CLICK, point=Point((x1 + x2) / 2, (y1 + y2) / 2))


# -- layout, no browser --------------------------------------------------------------------------
def test_same_seed_same_screen_and_seeds_differ():
    for params in ALL_PARAMS[::7]:
        a, b = generate(5, params), generate(5, params)
        assert a == b and a.html == b.html
        assert generate(6, params).html != a.html


def test_boxes_inside_the_viewport_disjoint_and_labels_distinct():
    for params, seed in itertools.product(ALL_PARAMS, range(12)):
        screen = generate(seed, params)
        assert (screen.width, screen.height) == FORM_FACTORS[params.form_factor]
        labels = [w.label for w in screen.widgets]
        assert len(set(labels)) == len(labels), labels
        for w in screen.widgets:
            x, y, bw, bh = w.box
            assert bw > 0 and bh > 0 and x >= 0 and y >= 0 and x + bw <= screen.width and y + bh <= screen.height
        for a, b in itertools.combinations(screen.widgets, 2):
            (ax, ay, aw, ah), (bx, by, bw, bh) = a.box, b.box
            assert ax + aw <= bx or bx + bw <= ax or ay + ah <= by or by + bh <= ay, (a, b)
        task = screen.task
        if task.kind is TaskKind.ABSENT:
            assert task.named_label not in labels and task.plan[0].kind == "infeasible"
        else:
            assert all(t in {w.id for w in screen.widgets} for t in task.target_ids)
            assert f"“{task.named_label}”" in task.instruction or f'"{task.named_label}"' in task.instruction


def test_difficulty_and_language_change_the_screen():
    easy = generate(1, ScreenParams(TaskKind.CLICK, "easy"))
    hard = generate(1, ScreenParams(TaskKind.CLICK, "hard"))
    assert len(hard.widgets) > len(easy.widgets)
    assert hard.widget(hard.task.target_ids[0]).box[3] == DIFFICULTIES["hard"].target_height
    zh = generate(1, ScreenParams(TaskKind.CLICK, language="zh"))
    assert zh.task.instruction.endswith(("按钮", "图标", "链接", "标签页", "”", "复选框"))
    assert any("\u4e00" <= ch <= "\u9fff" for ch in zh.task.instruction)
    form = generate(1, ScreenParams(TaskKind.FORM, "medium"))
    assert form.task.instruction.startswith("Type ") and form.task.instruction.endswith('then click "Submit"')
    assert [s.kind for s in form.task.plan] == ["type", "type", "click"]


# -- in the browser ------------------------------------------------------------------------------
_RECTS_JS = """() => Object.fromEntries([...document.querySelectorAll('[data-wid]')].map(el => {
  const b = el.getBoundingClientRect(); return [el.dataset.wid, [b.left, b.top, b.width, b.height]]; }))"""


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_phrasing_suite_cycles_its_forms_by_seed(language):
    wording = forms(language)
    assert len(PHRASINGS) >= 30 and len({p.id for p in PHRASINGS}) == len(PHRASINGS)
    for seed in range(len(wording) + 1):
        screen = generate(seed, ScreenParams(language=language, phrasing=True))
        form = wording[seed % len(wording)]
        assert screen.task.phrasing == form.id
        assert screen.task.instruction == form.instruction(screen.task.named_label)
        role = screen.widget(screen.task.target_ids[0]).role
        assert role is Role(form.role) if form.role else role is not Role.ICON_BUTTON
    # without the flag the screens are the ones they always were
    plain = generate(3, ScreenParams(language=language))
    assert plain.task.phrasing == "" and plain == generate(3, ScreenParams(language=language, phrasing=False))


@pytest.mark.parametrize("params", [
    ScreenParams(TaskKind.CLICK, "hard", "en", "light", "desktop"),
    ScreenParams(TaskKind.CLICK, "hard", "zh", "dark", "phone"),
    ScreenParams(TaskKind.FORM, "medium", "zh", "light", "desktop"),
    ScreenParams(TaskKind.ABSENT, "easy", "en", "dark", "phone"),
], ids=lambda p: f"{p.task_kind.value}-{p.difficulty}-{p.language}-{p.form_factor}")
def test_ground_truth_boxes_equal_the_dom(run, device, params):
    env = GeneratedEnv(params.task_kind.value, params.difficulty, params.language, params.theme, params.form_factor,
                       device=device)
    for seed in range(3):
        obs, info = run(env.reset(seed=seed))
        screen = env.screen
        assert (obs.width, obs.height) == (screen.width, screen.height)
        rects = run(device.evaluate(_RECTS_JS))
        assert rects == {w.id: list(w.box) for w in screen.widgets}
        assert info["target_boxes"] == [list(screen.norm_box(t)) for t in screen.task.target_ids]


@pytest.mark.parametrize("name", [s.name for s in all_specs("generated")])
def test_oracle_reaches_reward_one(run, device, name):
    env = next(s for s in all_specs("generated") if s.name == name).make(device=device)
    oracle = OraclePolicy(env)
    for seed in range(3):
        obs, info = run(env.reset(seed=seed))
        terminated = truncated = False
        reward = 0.0
        while not (terminated or truncated):
            decision = run(oracle.decide(info["instruction"], [], obs))
            obs, reward, terminated, truncated, step_info = run(env.step(decision.action))
        assert terminated and reward == 1.0 and step_info["success"], (name, seed, step_info)
        assert run(env.unwrapped.current_step()) is None
        assert run(oracle.decide("", [], obs)).action.kind is ActionKind.FINISH


def test_click_on_a_distractor_gives_zero_and_verify_tells_them_apart(run, device):
    env = GeneratedEnv("click", "hard", device=device)
    obs, info = run(env.reset(seed=2))
    screen = env.screen
    target = screen.task.target_ids[0]
    assert len(screen.task.distractor_ids) == DIFFICULTIES["hard"].distractors
    distractor = screen.widget(screen.task.distractor_ids[0])
    x1, y1, x2, y2 = screen.norm_box(target)
    corner = Action(ActionKind.CLICK, point=Point(x2, y2))
    outside = Action(ActionKind.CLICK, point=Point(min(1.0, x2 + 2 / screen.width), y2))
    verdicts = run(env.verify([_click(screen, target), _click(screen, distractor.id), corner, outside,
                               Action(ActionKind.INFEASIBLE, text="no")]))
    assert [v.correct for v in verdicts] == [True, False, True, False, False]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 1.0, 0.0, 0.0]
    obs, reward, terminated, truncated, info = run(env.step(_click(screen, distractor.id)))
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)
    assert info["verdict"]["clicked"] == distractor.id


def test_blank_clicks_run_out_the_step_budget(run, device):
    # The budget is TimeLimit's (envs.registry.make applies it); the environment itself never truncates.
    env = TimeLimit(GeneratedEnv("click", "easy", device=device), max_steps=2)
    run(env.reset(seed=0))
    blank = Action(ActionKind.CLICK, point=Point(0.0, 0.0))  # the app title: no widget
    assert run(env.step(blank))[1:4] == (0.0, False, False)
    assert run(env.step(blank))[1:4] == (0.0, False, True)
    assert env.elapsed_steps == 2
    run(env.reset(seed=0))  # a new episode has the whole budget again
    assert env.elapsed_steps == 0 and run(env.step(blank))[1:4] == (0.0, False, False)
    # registered environments come with their budget: a click task is one click, a form up to eight steps
    assert make("generated/click").max_steps == 3 and make("generated/form").max_steps == 8
    assert make("generated/click", max_steps=5).max_steps == 5


def test_finish_before_the_task_is_done_gives_zero(run, device):
    env = GeneratedEnv("click", device=device)
    run(env.reset(seed=1))
    assert run(env.step(Action(ActionKind.FINISH)))[1:3] == (0.0, True)


def test_form_needs_the_right_text_in_the_right_field(run, device):
    env = GeneratedEnv("form", "medium", device=device)
    run(env.reset(seed=4))
    screen = env.screen
    first, second, submit = screen.task.plan
    point = _click(screen, first.widget_id).point
    other = _click(screen, second.widget_id).point
    verdicts = run(env.verify([
        Action(ActionKind.TYPE, point=point, text=first.text),
        Action(ActionKind.TYPE, point=point, text=first.text + "x"),
        Action(ActionKind.TYPE, point=other, text=first.text),
        Action(ActionKind.TYPE, text=first.text),  # nothing focused
        _click(screen, submit.widget_id),
    ]))
    assert [v.correct for v in verdicts] == [True, False, False, False, False]
    # a wrong text, then Submit: the checker reads the field, not the agent's claim
    run(env.step(Action(ActionKind.TYPE, point=point, text=first.text)))
    run(env.step(Action(ActionKind.TYPE, point=other, text="wrong")))
    _, reward, terminated, _, info = run(env.step(_click(screen, submit.widget_id)))
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert info["verdict"]["values"] == {first.widget_id: first.text, second.widget_id: "wrong"}


def test_absent_target_rewards_infeasible_only(run, device):
    env = GeneratedEnv("absent", "hard", device=device)
    run(env.reset(seed=3))
    screen = env.screen
    some = next(w for w in screen.widgets if w.role is not Role.TEXT_FIELD)
    verdicts = run(env.verify([Action(ActionKind.INFEASIBLE, text="absent"), _click(screen, some.id),
                               Action(ActionKind.ASK_USER, text="the model asked for the user")]))
    assert [v.correct for v in verdicts] == [True, False, True]  # asking the user abstains too
    assert run(env.step(Action(ActionKind.INFEASIBLE, text="absent")))[1:3] == (1.0, True)
    run(env.reset(seed=3))
    _, reward, terminated, _, info = run(env.step(_click(screen, some.id)))
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    run(env.reset(seed=3))
    assert run(env.step(Action(ActionKind.FINISH)))[1:3] == (0.0, True)


def test_infeasible_on_a_feasible_task_gives_zero(run, device):
    env = GeneratedEnv("click", device=device)
    run(env.reset(seed=0))
    abstentions = [Action(ActionKind.INFEASIBLE, text="cannot"), Action(ActionKind.ASK_USER, text="where?")]
    assert [v.correct for v in run(env.verify(abstentions))] == [False, False]
    assert run(env.step(Action(ActionKind.INFEASIBLE, text="cannot")))[1:3] == (0.0, True)


def test_conformance_catches_a_broken_env_and_an_owned_device_closes(run):
    class Broken(GeneratedEnv):
        async def step(self, action):
            obs, reward, terminated, truncated, info = await super().step(action)
            return obs, reward, True, True, info

    with pytest.raises(ConformanceError, match="both true"):
        run(check_env(TimeLimit(Broken("click", "easy", form_factor="phone"), 3)))
    with pytest.raises(ConformanceError, match="wrapped in TimeLimit"):
        run(check_env(GeneratedEnv("click", "easy", form_factor="phone")))
    env = GeneratedEnv("click", "easy")
    run(check_env(TimeLimit(env, 3)))
    assert env._device is None


def test_unknown_names_and_parameters_are_env_errors_that_say_what_to_use():
    with pytest.raises(UnknownEnv, match=r"no environment 'generated/clik-button'; did you mean generated/click"):
        make("generated/clik-button")
    with pytest.raises(KeyError):  # UnknownEnv is also a KeyError, for callers that look names up
        make("generated/clik-button")
    with pytest.raises(LayoutError, match="difficulty='brutal' is not one of") as caught:
        ScreenParams(TaskKind.CLICK, "brutal")
    assert isinstance(caught.value, EnvError)
