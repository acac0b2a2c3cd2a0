"""Member caps in a real browser: the PI sets a member's cap and a default from the
project's page, and the member then sees their own cap and what is left, and no form."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_pi_caps_a_member_who_then_sees_their_cap(open_page, make_project, alice, bob):
    project = make_project(members={alice: "pi", bob: "member"}, gpu_hours=100, in_slurm=False)
    pi = open_page()
    log_in(pi, "alice")
    pi.goto(f"/projects/{project.slug}/")
    pi.get_by_role("link", name="Member caps").click()
    expect(pi.get_by_role("heading", level=1)).to_contain_text("Member caps of")

    pi.get_by_label("Member").select_option("bob")
    pi.get_by_label("Cap (GPU-hours)").fill("20")
    pi.get_by_role("button", name="Set cap").click()
    expect(pi.locator("[data-cap-row='bob'] td").nth(1)).to_have_text("20 GPU-h")
    pi.get_by_label("Member").select_option("*")
    pi.get_by_label("Cap (GPU-hours)").fill("-3")
    pi.get_by_role("button", name="Set cap").click()
    expect(pi.locator("#error-gpu_hours, .form-error").first).to_be_visible()
    pi.get_by_label("Cap (GPU-hours)").fill("5")
    pi.get_by_role("button", name="Set cap").click()
    expect(pi.locator("[data-cap-row='alice'] td").nth(1)).to_have_text("5 GPU-h (default)")
    expect(pi.locator("[data-cap-row='bob'] td").nth(1)).to_have_text("20 GPU-h")
    screenshot(pi, "member-caps.png")

    member = open_page()
    log_in(member, "bob")
    member.goto(f"/projects/{project.slug}/")
    expect(member.locator("[data-my-cap]")).to_contain_text("Your cap on")
    expect(member.locator("[data-my-cap]")).to_contain_text("20 GPU-h left")
    member.get_by_role("link", name="Your cap").click()
    expect(member.locator("[data-cap-row]")).to_have_count(1)
    expect(member.locator("[data-cap-row='bob']")).to_be_visible()
    expect(member.get_by_role("button", name="Set cap")).to_have_count(0)
