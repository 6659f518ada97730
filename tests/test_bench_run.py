"""`python -m bench.run --merge` keeps each earlier section with the stamp of the run that measured it."""

from bench.run import SECTIONS, earlier_sections, render


def section(name: str, body: str, when: str | None) -> dict:
    return {"name": name, "title": SECTIONS[name][0], "body": body, "error": None, "seconds": 12.0, "when": when}


def test_merge_keeps_each_sections_own_stamp(tmp_path):
    head = "# agentlab benchmarks\n\n- **date**: 2026-12-01 10:00 UTC\n- **machine**: Old CPU\n- **code**: git abc123"
    out = tmp_path / "RESULTS.md"
    out.write_text(render(head, [section("rollout", "| a |\n|---|\n| 1 |", "2026-12-03 05:41 UTC on AMD EPYC, "
                                                                                  "git d8b2b3f, --quick"),
                                 section("gae", "**Goal met**: fast.", None)], ""))
    found = earlier_sections(out)
    assert set(found) == {"rollout", "gae"}
    assert found["rollout"]["when"] == "2026-12-03 05:41 UTC on AMD EPYC, git d8b2b3f, --quick"
    assert found["rollout"]["body"] == "| a |\n|---|\n| 1 |"
    # a section from before the stamps existed is dated by the file's header
    assert found["gae"]["when"] == "2026-12-01 10:00 UTC (git abc123, on Old CPU)"
    assert found["gae"]["body"] == "**Goal met**: fast." and found["gae"]["seconds"] == 12.0


def test_merge_keeps_a_section_merged_by_hand_word_for_word(tmp_path):
    # bench/RESULTS.md's real-model section has its own stamp line (two runs merged by hand) and a
    # subsection; a --merge run of another section once dropped it without a word.
    body = ("_Zero-shot: 1163 s to measure; measured 2026-12-03. Warmed: 2402 s. Merged by hand._\n\n| env |\n|---|\n"
            "| SQL |\n\n### GRPO on SmolLM2: the calibration runs\n\nSQL 0.275 -> 0.725.")
    head = "# agentlab benchmarks\n\n- **date**: 2026-12-01 10:00 UTC\n- **code**: git abc123"
    out = tmp_path / "RESULTS.md"
    out.write_text(render(head, [section("gae", "**Goal met**: fast.", None),
                                 dict(section("real", body, None), verbatim=True),
                                 section("openenv", "| b |", "2026-12-04")], ""))
    found = earlier_sections(out)
    assert set(found) == {"gae", "real", "openenv"}
    assert found["real"]["body"] == body and found["openenv"]["body"] == "| b |"
    again = render(head, list(found.values()), "")
    assert f"\n## {SECTIONS['real'][0]}\n\n{body}\n\n## " in again  # written back as it was
