// Surfaces over the channel: App Home tabs, modals (with errors under their fields) and
// confirmation dialogs. What is typed survives a redraw of the same view.
import { renderBlocks } from "./blocks.js";
import { $, S, act, h } from "./client.js";
import { plainText, textObject } from "./mrkdwn.js";

export function confirm(obj, ctx) {
  return new Promise((resolve) => {
    const back = $("#confirm-backdrop");
    const box = back.querySelector(".dialog");
    box.replaceChildren();
    box.append(h("h2", "dialog-title", plainText(obj.title) || "Are you sure?"));
    box.appendChild(h("div", "dialog-body")).append(textObject(obj.text, ctx));
    const row = box.appendChild(h("div", "dialog-buttons"));
    const deny = row.appendChild(h("button", "bk-button", plainText(obj.deny) || "Cancel"));
    const ok = row.appendChild(h("button", `bk-button ${obj.style === "danger" ? "bk-danger" : "bk-primary"}`, plainText(obj.confirm) || "Yes"));
    const done = (answer) => {
      back.hidden = true;
      resolve(answer);
    };
    deny.onclick = () => done(false);
    ok.onclick = () => done(true);
    back.hidden = false;
    ok.focus();
  });
}

function collect(inputs) {
  const values = {};
  for (const input of inputs) {
    (values[input.blockId] = values[input.blockId] || {})[input.actionId] = input.read();
  }
  return values;
}

export function renderHome(ctx, appId) {
  const view = S.snap.homes[appId];
  const home = $("#home");
  const key = view ? view.id + view.hash : "none";
  if (key === S.homeKey) return;
  const restore = S.homeKey ? collect(S.homeInputs) : null;
  S.homeKey = key;
  if (!view) {
    home.replaceChildren(h("div", "empty", "This app has not published a Home tab for you yet."));
    return;
  }
  const inputs = [];
  const homeCtx = { ...ctx, state: view.state.values, restore, errors: view.errors, inputs,
    act: (block, element, value) => act("view_action", {
      view_id: view.id, block_id: block.block_id, action_id: element.action_id, value, values: collect(inputs),
    }) };
  S.homeInputs = inputs;
  home.replaceChildren(renderBlocks(view.blocks, homeCtx));
}

export function renderModal(ctx) {
  const back = $("#modal-backdrop");
  const view = S.snap.modal;
  if (!view) {
    back.hidden = true;
    S.modalKey = null;
    return;
  }
  const key = view.id + view.hash + JSON.stringify(view.errors);
  if (key === S.modalKey) return;
  const restore = S.modalKey && S.modalKey.startsWith(view.id) ? collect(S.modalInputs) : null;
  S.modalKey = key;
  const inputs = [];
  S.modalInputs = inputs;
  const modalCtx = { ...ctx, state: view.state.values, restore, errors: view.errors, inputs,
    act: (block, element, value) => act("view_action", {
      view_id: view.id, block_id: block.block_id, action_id: element.action_id, value, values: collect(inputs),
    }) };
  const box = back.querySelector(".modal");
  box.replaceChildren();
  const head = box.appendChild(h("div", "modal-head"));
  if (view.previous_view_id) {  // a pushed view: back to the one below
    const backTo = head.appendChild(h("button", "modal-back", "‹"));
    backTo.title = "Back";
    backTo.onclick = () => act("close", { view_id: view.id });
  }
  head.append(h("h2", "modal-title", plainText(view.title)));
  const x = head.appendChild(h("button", "modal-x", "✕"));
  x.title = "Close";
  x.onclick = () => act("close", { view_id: view.id, all: true });
  box.appendChild(h("div", "modal-body")).append(renderBlocks(view.blocks, modalCtx));
  const foot = box.appendChild(h("div", "modal-foot"));
  const problem = foot.appendChild(h("div", "modal-problem"));
  const close = foot.appendChild(h("button", "bk-button modal-close", plainText(view.close) || (view.submit ? "Cancel" : "Close")));
  close.onclick = () => act("close", { view_id: view.id });
  if (view.submit) {
    const submit = foot.appendChild(h("button", "bk-button bk-primary modal-submit", plainText(view.submit)));
    submit.onclick = async () => {
      submit.disabled = true;
      problem.textContent = "";
      const answer = await act("submit", { view_id: view.id, values: collect(inputs) });
      if (!answer.ok) problem.textContent = answer.error;
      submit.disabled = false;
    };
  }
  back.hidden = false;
}
