"""views.open, views.push, views.update and views.publish: modal stacks, App Home, trigger ids
(valid once and for 3 seconds) and view hashes."""

from __future__ import annotations

import secrets

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.blocks import check_view
from flotilla.local_slack.records import Json, Trigger, View, new_view_hash

TRIGGER_TTL_SECONDS = 3.0
MODAL_STACK_MAX = 3


def _view_spec(call: Call, *, kind: str) -> Json:
    spec = call.json_arg("view", "invalid_arguments")
    if spec is None:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] missing required field: view"]},
        )
    errors = check_view(spec)
    if not errors and spec.get("type") != kind:
        errors = [f"must be {kind} [json-pointer:/view/type]"]
    if errors:
        raise ApiError(
            "invalid_arguments", response_metadata={"messages": [f"[ERROR] {e}" for e in errors]}
        )
    external_id = spec.get("external_id")
    if external_id:
        for view in call.state.views.values():
            if view.spec.get("external_id") == external_id and not view.closed:
                raise ApiError("duplicate_external_id")
    return assign_ids(dict(spec))


def assign_ids(spec: Json) -> Json:
    """Give blocks and input elements the ids Slack generates when they are missing."""
    blocks = [dict(b) for b in spec.get("blocks", [])]
    for block in blocks:
        block.setdefault("block_id", secrets.token_urlsafe(4)[:5])
        if block.get("type") == "input" and isinstance(block.get("element"), dict):
            block["element"] = {"action_id": secrets.token_urlsafe(4)[:5], **block["element"]}
    spec["blocks"] = blocks
    return spec


def _use_trigger(call: Call) -> Trigger:
    trigger_id = call.str_arg("trigger_id") or call.str_arg("interactivity_pointer")
    if not trigger_id:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] missing required field: trigger_id"]},
        )
    trigger = call.state.triggers.get(trigger_id)
    if trigger is None or trigger.app_id != call.app.app_id:
        raise ApiError("invalid_trigger_id")
    if trigger.used:
        raise ApiError("exchanged_trigger_id")
    if call.ws.clock() - trigger.issued_at > TRIGGER_TTL_SECONDS:
        raise ApiError("expired_trigger_id")
    trigger.used = True
    return trigger


@method("views.open")
async def views_open(call: Call) -> Json:
    spec = _view_spec(call, kind="modal")
    trigger = _use_trigger(call)
    for view_id in call.state.modal_stacks.get((trigger.user_id, call.app.app_id), []):
        call.state.views[view_id].closed = True
    view = call.state.new_view(call.app, trigger.user_id, spec, None)
    call.state.modal_stacks[(trigger.user_id, call.app.app_id)] = [view.id]
    call.state.changed()
    return {"view": view.to_json()}


@method("views.push")
async def views_push(call: Call) -> Json:
    spec = _view_spec(call, kind="modal")
    trigger = _use_trigger(call)
    stack = call.state.modal_stacks.get((trigger.user_id, call.app.app_id), [])
    if not stack:
        raise ApiError("not_found")
    if len(stack) >= MODAL_STACK_MAX:
        raise ApiError("push_limit_reached")
    view = push_view(call.state.views[stack[-1]], call, spec)
    return {"view": view.to_json()}


def push_view(top: View, call: Call, spec: Json) -> View:
    """Put a new modal on top of `top`'s stack (also used for `response_action: push`)."""
    view = call.state.new_view(call.app, top.user_id, spec, top.root_view_id)
    view.previous_view_id = top.id
    call.state.modal_stacks[(top.user_id, call.app.app_id)].append(view.id)
    call.state.changed()
    return view


def _find_view(call: Call) -> View:
    view_id, external_id = call.str_arg("view_id"), call.str_arg("external_id")
    if not view_id and not external_id:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] either view_id or external_id is required"]},
        )
    for view in call.state.views.values():
        same = view.id == view_id if view_id else view.spec.get("external_id") == external_id
        if same and view.app_id == call.app.app_id and not view.closed:
            return view
    raise ApiError("not_found")


def replace_view(view: View, spec: Json) -> None:
    """New content for a view: fresh hash, errors cleared, input values kept."""
    view.spec = spec
    view.hash = new_view_hash()
    view.errors = {}


def _replace_unless_changed(call: Call, view: View, spec: Json) -> None:
    """`replace_view`, refused with `hash_conflict` when the caller saw an older view."""
    expected = call.str_arg("hash")
    if expected and expected != view.hash:
        raise ApiError("hash_conflict")
    replace_view(view, spec)


@method("views.update")
async def views_update(call: Call) -> Json:
    view = _find_view(call)
    _replace_unless_changed(call, view, _view_spec(call, kind=view.type))
    call.state.changed()
    return {"view": view.to_json()}


@method("views.publish")
async def views_publish(call: Call) -> Json:
    user_id = call.str_arg("user_id", required=True) or ""
    spec = _view_spec(call, kind="home")
    if user_id not in call.state.people or call.state.people[user_id].is_bot:
        raise ApiError("user_not_found")
    key = (user_id, call.app.app_id)
    existing = call.state.home_views.get(key)
    if existing is None:
        view = call.state.new_view(call.app, user_id, spec, None)
        call.state.home_views[key] = view.id
    else:
        view = call.state.views[existing]
        _replace_unless_changed(call, view, spec)
    call.state.changed()
    return {"view": view.to_json()}
