// Messages as Slack draws them: avatar, name, APP badge, time, blocks or mrkdwn, "(edited)",
// streaming, ephemeral notes, replies links; and apps' status lines under threads. A message
// is redrawn only when it changed, so what is typed into its inputs survives other updates.
import { renderBlocks } from "./blocks.js";
import { S, act, h, toast } from "./client.js";
import { emojiChar, emojiNode } from "./emoji.js";
import { mrkdwn } from "./mrkdwn.js";

/** An app's status line under a thread ("Flotilla is thinking…"), kept while unchanged so
 * its rotating loading messages run on. */
const statusNodes = new Map();
export function statusNode(channel, threadTs, where) {
  const found = S.snap.statuses.find((s) => s.channel === channel && s.thread_ts === threadTs);
  const key = where + channel + threadTs;
  if (!found) {
    statusNodes.delete(key);
    return null;
  }
  const sig = JSON.stringify(found);
  const cached = statusNodes.get(key);
  if (cached && cached.sig === sig) return cached.node;
  const node = h("div", `thread-status ${where}`);
  node.append(h("span", "status-text", found.text));
  if (found.loading_messages.length) {
    const rotating = node.appendChild(h("span", "status-loading", found.loading_messages[0]));
    rotating.dataset.messages = JSON.stringify(found.loading_messages);
  }
  statusNodes.set(key, { sig, node });
  return node;
}

// Loading messages take turns, as in Slack (an animation of what the page holds, not a poll).
setInterval(() => {
  for (const el of document.querySelectorAll(".status-loading")) {
    const messages = JSON.parse(el.dataset.messages);
    el.textContent = messages[(messages.indexOf(el.textContent) + 1) % messages.length];
  }
}, 2500);

const dividers = new Map();
export function divider(text) {
  if (!dividers.has(text)) dividers.set(text, h("div", "thread-divider", text));
  return dividers.get(text);
}

export function avatar(name, icons) {
  const el = h("div", "avatar");
  const code = icons && icons.emoji && /^:([^:\s]+(?:::skin-tone-\d)?):$/.exec(icons.emoji.trim());
  const pic = code && emojiNode(code[1]);
  if (pic) {
    el.append(pic);
    el.classList.add("avatar-emoji");
    return el;
  }
  el.textContent = (name || "?").slice(0, 1).toUpperCase();
  let hash = 0;
  for (const ch of name || "") hash = (hash * 31 + ch.charCodeAt(0)) % 360;
  el.style.background = `hsl(${hash} 45% 42%)`;
  return el;
}

function time(ts) {
  const d = new Date(parseFloat(ts) * 1000);
  return d.toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
}

export function messageNode(msg, ctx, inThread) {
  const key = (inThread ? "t" : "c") + (msg.ephemeral ? "e" : "") + msg.channel + msg.ts;
  if (msg.ephemeral && S.dismissed.has(key)) return null;
  const sig = JSON.stringify([msg, S.user, S.snap.people.length]);
  const cached = S.nodes.get(key);
  if (cached && cached.sig === sig) return cached.node;
  const node = drawMessage(msg, ctx, inThread, key);
  if (cached) keepTyped(cached.node, node);
  S.nodes.set(key, { sig, node });
  return node;
}

/** What a person typed into a message's inputs survives a redraw of that message (a
 * client keeps a draft while the app edits the message, or the snapshot moves on). */
function keepTyped(old, fresh) {
  const before = old.querySelectorAll("textarea, input, select");
  const after = fresh.querySelectorAll("textarea, input, select");
  before.forEach((el, i) => {
    const to = after[i];
    if (!to || to.tagName !== el.tagName || to.type !== el.type) return;
    if (el.type === "checkbox" || el.type === "radio") to.checked = el.checked;
    else if (el.multiple) [...to.options].forEach((o, j) => (o.selected = el.options[j]?.selected || o.selected));
    else if (el.value && !to.value) to.value = el.value;
    if (document.activeElement === el) setTimeout(() => to.focus(), 0);  // once it is placed
  });
}

function drawMessage(msg, ctx, inThread, key) {
  const el = h("div", "message");
  el.dataset.ts = msg.ts;
  if (msg.ephemeral) el.classList.add("ephemeral");
  if (msg.streaming) el.classList.add("streaming");
  if (msg.deleted) el.classList.add("deleted");
  el.append(avatar(msg.author_name, msg.icons));
  const body = el.appendChild(h("div", "message-body"));
  const head = body.appendChild(h("div", "message-head"));
  head.append(h("span", "author", msg.author_name));
  if (msg.is_app) head.append(h("span", "app-badge", "APP"));
  head.append(h("span", "time", time(msg.ts)));
  if (msg.ephemeral) head.appendChild(h("span", "only-you")).append(emojiChar("👁️", "eye"), "Only visible to you");
  const inputs = [];  // the message's input blocks, read back when one of its buttons is clicked
  const msgCtx = { ...ctx, inputs, act: (block, element, value) => messageAction(msg, block, element, value, inputs) };
  const content = body.appendChild(h("div", "message-content"));
  if (msg.blocks && msg.blocks.length) content.append(renderBlocks(msg.blocks, msgCtx));
  else content.append(mrkdwn(msg.text, msgCtx));
  if (msg.edited) {
    const texts = content.querySelectorAll(".mrkdwn, .plain, .md-p, .rt-section");
    (texts.length ? texts[texts.length - 1] : content).append(h("span", "edited", " (edited)"));
  }
  for (const file of msg.files || []) {
    content.appendChild(h("div", "file")).append(emojiChar("📎", "paperclip"), `${file.name} (${file.mimetype}, ${file.size} bytes)`);
  }
  if (msg.streaming) content.append(h("span", "typing", "▍"));
  if (msg.subtype === "thread_broadcast" && !inThread) body.append(h("div", "broadcast", "replied to a thread"));
  if (!inThread && msg.reply_count) {
    const replies = body.appendChild(h("button", "replies-link", `${msg.reply_count} ${msg.reply_count === 1 ? "reply" : "replies"}`));
    replies.addEventListener("click", () => ctx.openThread(msg.channel, msg.ts));
  }
  if (msg.ephemeral) {
    const dismiss = body.appendChild(h("button", "dismiss", "Dismiss message"));
    dismiss.addEventListener("click", () => {
      S.dismissed.add(key);
      ctx.rerender();
    });
  } else if (!inThread && !msg.deleted) {
    const tools = el.appendChild(h("div", "message-tools"));
    const reply = tools.appendChild(h("button", "reply-button"));
    reply.append(emojiChar("💬", "speech_balloon"), "Reply in thread");
    reply.addEventListener("click", () => ctx.openThread(msg.channel, msg.thread_ts || msg.ts));
  }
  return el;
}

/** A click in a message carries what the person typed into its inputs (Slack's `state`). */
async function messageAction(msg, block, element, value, inputs) {
  if (msg.ephemeral) {
    toast("Buttons in ephemeral messages are not supported here.");
    return { ok: false };
  }
  const values = {};
  for (const input of inputs) {
    const read = input.read();
    (values[input.blockId] = values[input.blockId] || {})[input.actionId] = read === "" ? null : read;
  }
  return act("message_action", {
    channel: msg.channel, ts: msg.ts, block_id: block.block_id, action_id: element.action_id, value, values,
  });
}


