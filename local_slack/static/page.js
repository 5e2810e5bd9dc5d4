// The local workspace in the browser: channels, threads beside them, App Home, modals and a
// composer that also runs slash commands. Everything shown comes from the workspace's state,
// pushed over Server-Sent Events; everything done goes to POST act as the chosen person.
import { $, S, act, h, toast } from "./client.js";
import { emojiChar } from "./emoji.js";
import { avatar, divider, messageNode, statusNode } from "./messages.js";
import { confirm, renderHome, renderModal } from "./surfaces.js";

// ----- talking to the workspace ---------------------------------------------------------------

function connect() {
  if (S.source) S.source.close();
  S.lastData = null;
  const query = S.user ? `?user=${encodeURIComponent(S.user)}` : "";
  const source = new EventSource("events" + query);
  source.addEventListener("state", (ev) => {
    const same = ev.data.replace(/^\{"version":\d+,/, "{"); // most changes are not this person's
    if (same === S.lastData && S.snap) return;
    S.lastData = same;
    S.snap = JSON.parse(ev.data);
    S.user = S.snap.me;
    render();
    setLive(true); // only once the page shows the workspace as it is
  });
  source.onerror = () => setLive(false);
  S.source = source;
}

function setLive(live) {
  const el = $("#live");
  el.textContent = live ? "● live" : "● reconnecting…";
  el.classList.toggle("offline", !live);
}


// ----- context for rendering text and blocks -------------------------------------------------

function baseCtx() {
  const snap = S.snap;
  const ctx = {
    me: snap.me,
    people: new Map(snap.people.map((p) => [p.id, p])),
    channels: new Map(snap.channels.map((c) => [c.id, c])),
    openChannel: (id) => openChannel(id),
    openThread: (channel, ts) => openThread(channel, ts),
    rerender: () => render(),
    permalink: (url) => {
      const m = new RegExp(`^https://${snap.team.domain}\\.slack\\.com/archives/([A-Z0-9]+)(?:/p(\\d{10})(\\d{6}))?`).exec(url);
      if (!m || !ctx.channels.has(m[1])) return null;
      return () => (m[2] ? openThread(m[1], `${m[2]}.${m[3]}`) : openChannel(m[1]));
    },
    confirm: (obj) => confirm(obj, ctx),
  };
  return ctx;
}


// ----- navigation --------------------------------------------------------------------------

function openChannel(id) {
  S.view = { kind: "channel", id };
  if (S.thread && S.thread.channel !== id) S.thread = null;
  saveLocation();
  render();
}

function openThread(channel, ts) {
  if (!S.view || S.view.kind !== "channel" || S.view.id !== channel) {
    const dm = S.view && S.view.kind === "app" && S.view.dm === channel;
    if (!dm) S.view = { kind: "channel", id: channel };
  }
  S.thread = { channel, ts };
  saveLocation();
  render();
  $("#thread-composer textarea").focus();
}

async function openApp(appId, tab) {
  S.view = { kind: "app", appId, tab, dm: S.view && S.view.appId === appId ? S.view.dm : null };
  S.thread = null;
  S.homeKey = null;
  saveLocation();
  render();
  const answer = await act("open_app", { app_id: appId, tab });
  if (answer.ok && S.view.kind === "app" && S.view.appId === appId) {
    S.view.dm = answer.channel;
    render();
  }
}

function saveLocation() {
  const v = S.view;
  let hash = "";
  if (v && v.kind === "channel") hash = `#${v.id}` + (S.thread ? `/${S.thread.ts}` : "");
  if (v && v.kind === "app") hash = `#app/${v.appId}/${v.tab}`;
  history.replaceState(null, "", location.pathname + location.search + hash);
}

function restoreLocation() {
  const [first, second, third] = location.hash.slice(1).split("/");
  if (first === "app" && second) openApp(second, third === "messages" ? "messages" : "home");
  else if (first) {
    S.view = { kind: "channel", id: first };
    if (second) S.thread = { channel: first, ts: second };
  }
}

// ----- rendering ---------------------------------------------------------------------------

function render() {
  if (!S.snap) return;
  const ctx = baseCtx();
  if (!S.view || (S.view.kind === "channel" && !ctx.channels.has(S.view.id))) {
    const first = S.snap.channels.find((c) => !c.is_im && c.is_member) || S.snap.channels[0];
    S.view = first ? { kind: "channel", id: first.id } : null;
    S.thread = null;
  }
  renderTop(ctx);
  renderSidebar(ctx);
  renderMain(ctx);
  renderThread(ctx);
  renderModal(ctx);
}

function renderTop(ctx) {
  $("#team-name").textContent = S.snap.team.name;
  const place = S.view && S.view.kind === "channel" && ctx.channels.get(S.view.id);
  document.title = `${place ? (place.is_im ? place.label : "#" + place.name) + " – " : ""}${S.snap.team.name}`;
  const select = $("#person");
  const people = S.snap.people.filter((p) => !p.is_bot);
  const sig = JSON.stringify(people) + S.user;
  if (select.dataset.sig !== sig) {
    select.replaceChildren(...people.map((p) => {
      const opt = h("option", "", p.name + (p.is_admin ? " (admin)" : ""));
      opt.value = p.id;
      return opt;
    }));
    select.value = S.user;
    select.dataset.sig = sig;
  }
  const me = ctx.people.get(S.user);
  $("#me-avatar").replaceChildren(avatar(me ? me.name : "?"));
}

/** A channel's name after its mark: "# " or the lock of a private channel. */
function channelName(channel) {
  const name = document.createDocumentFragment();
  name.append(channel.is_private ? emojiChar("🔒", "lock") : "# ", channel.name);
  return name;
}

function sideItem(label, active, onClick, cls) {
  const li = h("li", "side-item" + (active ? " active" : "") + (cls ? " " + cls : ""));
  li.append(...[label].flat());
  li.addEventListener("click", onClick);
  return li;
}

/** Channels with messages the person has not had on screen are bold, as in Slack. */
function unread(channelId) {
  const v = S.view || {};
  const latest = (S.snap.messages[channelId] || []).reduce((m, msg) => (msg.ts > m ? msg.ts : m), "");
  const open = (v.kind === "channel" && v.id === channelId) || v.dm === channelId;
  if (open || !S.seen.has(channelId)) S.seen.set(channelId, latest);
  return latest > S.seen.get(channelId) ? " unread" : "";
}

function renderSidebar(ctx) {
  const v = S.view || {};
  const channels = S.snap.channels.filter((c) => !c.is_im);
  $("#channel-list").replaceChildren(...channels.map((c) => sideItem(
    channelName(c), v.kind === "channel" && v.id === c.id,
    () => openChannel(c.id), (c.is_member ? "" : "not-member") + unread(c.id))));
  const appUsers = new Set(S.snap.apps.map((a) => a.bot_user_id));
  const dms = S.snap.channels.filter((c) => c.is_im && !c.members.some((m) => appUsers.has(m)));
  $("#dm-list").replaceChildren(...dms.map((c) => sideItem("● " + c.label, v.id === c.id, () => openChannel(c.id), unread(c.id))));
  const apps = S.snap.apps.filter((a) => a.has_home || a.commands.length);
  $("#app-list").replaceChildren(...apps.map((a) => sideItem(
    [emojiChar("🤖", "robot_face"), a.name], v.kind === "app" && v.appId === a.app_id, () => openApp(a.app_id, "home"))));
}

function renderMain(ctx) {
  const v = S.view;
  const header = $("#pane-header");
  const home = $("#home");
  const list = $("#messages");
  const composer = $("#composer");
  if (!v) {
    header.replaceChildren(h("span", "pane-title", "No channels"));
    return;
  }
  if (v.kind === "app") {
    const app = S.snap.apps.find((a) => a.app_id === v.appId);
    const tabs = h("div", "tabs");
    for (const tab of ["home", "messages"]) {
      const t = tabs.appendChild(h("button", "tab" + (v.tab === tab ? " active" : ""), tab === "home" ? "Home" : "Messages"));
      t.addEventListener("click", () => openApp(v.appId, tab));
    }
    header.replaceChildren(h("span", "pane-title", app ? app.name : "App"), tabs);
    const showHome = v.tab === "home";
    home.hidden = !showHome;
    list.hidden = composer.hidden = showHome;
    $("#join-bar").hidden = true;
    if (showHome) return renderHome(ctx, v.appId);
    if (v.dm) renderChannel(ctx, v.dm, `Message ${app ? app.name : "the app"}`);
    else fillList(list, []);
    return;
  }
  home.hidden = true;
  list.hidden = composer.hidden = false;
  const channel = ctx.channels.get(v.id);
  const title = h("span", "pane-title");
  title.append(channel.is_im ? channel.label : channelName(channel));
  header.replaceChildren(title, h("span", "pane-meta", `${channel.members.length} members`));
  renderChannel(ctx, v.id, `Message ${channel.is_im ? channel.label : "#" + channel.name}`);
}

function renderChannel(ctx, channelId, placeholder) {
  const channel = ctx.channels.get(channelId);
  const messages = S.snap.messages[channelId] || [];
  const shown = messages.filter((m) => !m.thread_ts || m.thread_ts === m.ts || m.subtype === "thread_broadcast");
  const ephemerals = S.snap.ephemerals.filter((e) => e.channel === channelId && !e.thread_ts);
  const items = [...shown, ...ephemerals].sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
  const nodes = [];
  for (const m of items) {
    const node = messageNode(m, ctx, false);
    if (node) nodes.push(node);
    const status = !m.ephemeral && statusNode(channelId, m.ts, "in-channel");
    if (status) nodes.push(status);
  }
  fillList($("#messages"), nodes);
  const composer = $("#composer");
  composer.querySelector("textarea").placeholder = placeholder;
  composer.dataset.channel = channelId;
  const joinBar = $("#join-bar");
  joinBar.hidden = !channel || channel.is_member;
  composer.querySelector("textarea").disabled = Boolean(channel && !channel.is_member);
}

function renderThread(ctx) {
  const pane = $("#thread");
  const t = S.thread;
  const parentMsg = t && (S.snap.messages[t.channel] || []).find((m) => m.ts === t.ts);
  if (!t || !parentMsg) {
    pane.hidden = true;
    return;
  }
  pane.hidden = false;
  const channel = ctx.channels.get(t.channel);
  $("#thread-channel").textContent = channel.is_im ? channel.label : "#" + channel.name;
  const replies = (S.snap.messages[t.channel] || []).filter((m) => m.thread_ts === t.ts && m.ts !== t.ts);
  const ephemerals = S.snap.ephemerals.filter((e) => e.channel === t.channel && e.thread_ts === t.ts);
  const items = [...replies, ...ephemerals].sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts));
  const nodes = [messageNode(parentMsg, ctx, true)];
  if (replies.length) nodes.push(divider(`${replies.length} ${replies.length === 1 ? "reply" : "replies"}`));
  nodes.push(...items.map((m) => messageNode(m, ctx, true)).filter(Boolean));
  const status = statusNode(t.channel, t.ts, "in-thread");
  if (status) nodes.push(status);
  fillList($("#thread-messages"), nodes);
}

/** Keep the nodes that did not change (and what is typed in them); stick to the bottom. */
function fillList(container, nodes) {
  const atBottom = container.scrollHeight - container.scrollTop - container.clientHeight < 60;
  nodes.forEach((node, i) => {
    if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
  });
  while (container.children.length > nodes.length) container.lastElementChild.remove();
  if (atBottom) container.scrollTop = container.scrollHeight;
}

// ----- composing -----------------------------------------------------------------------------

async function send(textarea, channel, threadTs) {
  const text = textarea.value.trim();
  if (!text || !channel || !S.snap) return;
  textarea.value = "";
  textarea.style.height = "auto";
  hideCommands();
  if (text.startsWith("/")) {
    const [command, ...rest] = text.split(/\s+/);
    const known = S.snap.apps.some((a) => a.commands.includes(command));
    if (!known) return toast(`${command} is not a valid command. In Slack, messages that start with “/” are commands.`);
    const answer = await act("command", { channel, command, text: text.slice(command.length).trim() });
    if (answer.ok && !answer.acked) toast(`${command} failed: the app did not answer in time.`);
    return;
  }
  const answer = await act("post", { channel, text, thread_ts: threadTs || "" });
  if (!answer.ok) textarea.value = text;
}

function commandHints(textarea) {
  const box = $("#command-hints");
  const typed = textarea.value;
  if (!typed.startsWith("/") || /\s/.test(typed) || !S.snap) return hideCommands();
  const commands = S.snap.apps.flatMap((a) => a.commands.map((c) => [c, a.name])).filter(([c]) => c.startsWith(typed));
  if (!commands.length) return hideCommands();
  box.replaceChildren(...commands.map(([command, app]) => {
    const row = h("div", "command-hint");
    row.append(h("b", "", command), h("span", "", "  " + app));
    row.addEventListener("mousedown", (ev) => {
      ev.preventDefault();
      textarea.value = command + " ";
      hideCommands();
    });
    return row;
  }));
  box.hidden = false;
}

function hideCommands() {
  $("#command-hints").hidden = true;
}

function wireComposer(form, target) {
  const textarea = form.querySelector("textarea");
  textarea.addEventListener("input", () => {  // grow with Shift+Enter lines, up to a limit
    textarea.style.height = "auto";
    textarea.style.height = `${Math.min(textarea.scrollHeight, 240)}px`;
  });
  textarea.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      const [channel, threadTs] = target();
      send(textarea, channel, threadTs);
    }
  });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const [channel, threadTs] = target();
    send(textarea, channel, threadTs);
  });
  return textarea;
}

function start() {
  const main = wireComposer($("#composer"), () => [$("#composer").dataset.channel, null]);
  main.addEventListener("input", () => commandHints(main));
  main.addEventListener("blur", hideCommands);
  wireComposer($("#thread-composer"), () => [S.thread && S.thread.channel, S.thread && S.thread.ts]);
  $("#thread-close").addEventListener("click", () => {
    S.thread = null;
    saveLocation();
    render();
  });
  $("#join-button").addEventListener("click", () => act("join", { channel: S.view.id }));
  $("#person").addEventListener("change", (ev) => {
    S.user = ev.target.value;
    const person = S.snap.people.find((p) => p.id === S.user);
    const params = new URLSearchParams(location.search);
    params.set("as", person ? person.name : S.user);
    history.replaceState(null, "", `${location.pathname}?${params}${location.hash}`);
    S.nodes.clear();
    S.modalKey = S.homeKey = null;
    connect();
    if (S.view && S.view.kind === "app") openApp(S.view.appId, S.view.tab);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && S.snap && S.snap.modal && $("#confirm-backdrop").hidden) {
      act("close", { view_id: S.snap.modal.id });
    }
  });
  restoreLocation();
  connect();
}

start();
