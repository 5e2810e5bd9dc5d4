// What every part of the page shares: its state, DOM helpers, and acting as the person.

export const $ = (sel) => document.querySelector(sel);
export const h = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};

export const S = {
  snap: null,
  user: new URLSearchParams(location.search).get("as"),
  view: null, // {kind: "channel", id} or {kind: "app", appId, tab, dm}
  thread: null, // {channel, ts}
  seen: new Map(), // channel id -> newest ts the person has had on screen
  source: null,
  dismissed: new Set(),
  nodes: new Map(), // message key -> {sig, node}
  modalKey: null,
  modalInputs: [],
  homeKey: null,
  homeInputs: [],
};

export async function act(type, args) {
  try {
    const response = await fetch("act", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...args, type, user: S.user }),
    });
    const answer = await response.json();
    if (!answer.ok) toast(answer.error || "That did not work.");
    return answer;
  } catch (err) {
    toast("The local workspace is not answering.");
    return { ok: false, error: String(err) };
  }
}

export function toast(text) {
  const el = $("#toasts").appendChild(h("div", "toast", text));
  setTimeout(() => el.remove(), 6000);
}
