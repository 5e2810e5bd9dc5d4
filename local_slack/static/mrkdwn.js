// Slack's text formats as DOM nodes (never innerHTML): mrkdwn (*bold*, _italic_, ~strike~,
// `code`, ```blocks```, > quotes, <@U…> mentions, <#C…>, <!here>, <url|label>, :emoji:),
// the markdown of `markdown` blocks and streamed text, and plain_text.
import { emojiNode, emojiText, emojify } from "./emoji.js";

const h = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};

/** Slack escapes &, < and > in text; show them as the characters they stand for. */
export const unescape = (s) => s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");

const SAFE_URL = /^(https?:|mailto:)/i;

/** A link; links to this workspace's threads or channels open inside the page. */
export function link(url, label, ctx) {
  const a = h("a", "link", label);
  if (!SAFE_URL.test(url)) return h("span", "link-text", label);
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  const inside = ctx && ctx.permalink && ctx.permalink(url);
  if (inside) {
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      inside();
    });
  }
  return a;
}

export function mention(userId, label, ctx) {
  const person = ctx.people.get(userId);
  const span = h("span", "mention", "@" + (label || (person ? person.name : userId)));
  if (userId === ctx.me) span.classList.add("mention-me");
  return span;
}

function channelMention(channelId, label, ctx) {
  const channel = ctx.channels.get(channelId);
  const span = h("span", "mention channel-mention", "#" + (label || (channel ? channel.name : channelId)));
  if (channel && ctx.openChannel) {
    span.classList.add("clickable");
    span.addEventListener("click", () => ctx.openChannel(channelId));
  }
  return span;
}

/** `<…>` tokens: mentions, channels, special mentions, dates and links. */
function angle(token, ctx) {
  const [target, label] = splitOnce(token, "|");
  if (target.startsWith("@")) return mention(target.slice(1), label && unescape(label), ctx);
  if (target.startsWith("#")) return channelMention(target.slice(1), label && unescape(label), ctx);
  if (target.startsWith("!subteam^")) return h("span", "mention", label ? unescape(label) : "@group");
  if (target.startsWith("!date^")) return document.createTextNode(unescape(label || target));
  if (target.startsWith("!")) return h("span", "mention mention-me", "@" + target.slice(1));
  const url = unescape(target);
  return link(url, label ? unescape(label) : url, ctx);
}

function splitOnce(s, sep) {
  const i = s.indexOf(sep);
  return i < 0 ? [s, ""] : [s.slice(0, i), s.slice(i + 1)];
}

const INLINE = new RegExp(
  [
    "<([^<>\\n]+)>", // 1 mention, channel or link
    "`([^`\\n]+)`", // 2 code
    "(?<![\\w*])\\*(?=\\S)([^*\\n]*?\\S)\\*(?![\\w*])", // 3 bold
    "(?<![\\w_])_(?=\\S)([^_\\n]*?\\S)_(?![\\w_])", // 4 italic
    "(?<![\\w~])~(?=\\S)([^~\\n]*?\\S)~(?![\\w~])", // 5 strike
    ":([a-z0-9_+'-]+(?:::skin-tone-\\d)?):", // 6 emoji
    "(https?://[^\\s<>]*[^\\s<>.,;:!?)\\]'\"])", // 7 bare URL
  ].join("|"),
  "g",
);

/** mrkdwn within one line, appended to `parent`. */
function inline(text, ctx, parent) {
  let last = 0;
  INLINE.lastIndex = 0;
  const found = [...text.matchAll(INLINE)];
  for (const m of found) {
    if (m.index < last) continue;
    if (m.index > last) parent.append(emojiText(unescape(text.slice(last, m.index))));
    last = m.index + m[0].length;
    if (m[1] !== undefined) parent.append(angle(m[1], ctx));
    else if (m[2] !== undefined) parent.append(h("code", "code", unescape(m[2])));
    else if (m[3] !== undefined) inline(m[3], ctx, parent.appendChild(h("b")));
    else if (m[4] !== undefined) inline(m[4], ctx, parent.appendChild(h("i")));
    else if (m[5] !== undefined) inline(m[5], ctx, parent.appendChild(h("s")));
    else if (m[6] !== undefined) parent.append(emojiNode(m[6]) ?? m[0]);
    else if (m[7] !== undefined) parent.append(link(unescape(m[7]), unescape(m[7]), ctx));
  }
  if (last < text.length) parent.append(emojiText(unescape(text.slice(last))));
}

/** Lines of mrkdwn with quotes (`>` at a line's start), appended to `parent`. */
function lines(text, ctx, parent) {
  let quote = null;
  text.split("\n").forEach((line, i) => {
    const quoted = /^(&gt;|>)\s?/.exec(line);
    if (quoted) {
      if (!quote) quote = parent.appendChild(h("blockquote", "quote"));
      else quote.append(h("br"));
      inline(line.slice(quoted[0].length), ctx, quote);
      return;
    }
    if (quote) quote = null;
    else if (i > 0) parent.append(h("br"));
    inline(line, ctx, parent);
  });
}

/** mrkdwn text as a `<span class="mrkdwn">`. */
export function mrkdwn(text, ctx) {
  const root = h("span", "mrkdwn");
  const parts = String(text ?? "").split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1 && i < parts.length - 1) {
      root.append(h("pre", "code-block", unescape(part.replace(/^\n|\n$/g, ""))));
    } else {
      lines(i % 2 === 1 ? "```" + part : part, ctx, root);
    }
  });
  return root;
}

/** A text object: mrkdwn or plain_text (with emoji shortcodes unless `emoji: false`). */
export function textObject(obj, ctx) {
  if (!obj) return h("span");
  if (obj.type === "mrkdwn" && !obj.verbatim) return mrkdwn(obj.text, ctx);
  if (obj.type === "mrkdwn") return withEmoji(h("span", "mrkdwn"), unescape(obj.text || ""));
  return plainNode(obj);
}

/** A plain_text object as a `<span class="plain">`: emoji characters drawn, and its
 * `:shortcodes:` too unless `emoji: false`. */
export function plainNode(obj, cls = "plain") {
  return withEmoji(h("span", cls), (obj && obj.text) || "", !obj || obj.emoji !== false);
}

function withEmoji(el, text, shortcodes = false) {
  el.append(emojiText(text, shortcodes));
  return el;
}

export function plainText(obj) {
  if (!obj) return "";
  return obj.emoji === false ? obj.text || "" : emojify(obj.text || "");
}

// ----- markdown (markdown blocks and streamed text) ------------------------------------------

const MD_INLINE = new RegExp(
  [
    "`([^`\\n]+)`", // 1 code
    "\\*\\*(?=\\S)(.+?)\\*\\*", // 2 bold
    "__(?=\\S)(.+?)__", // 3 bold
    "(?<![\\w*])\\*(?=\\S)([^*\\n]*?\\S)\\*(?![\\w*])", // 4 italic
    "(?<![\\w_])_(?=\\S)([^_\\n]*?\\S)_(?![\\w_])", // 5 italic
    "~~(?=\\S)(.+?)~~", // 6 strike
    "\\[([^\\]\\n]+)\\]\\(([^)\\s]+)\\)", // 7, 8 link
    "<@([UW][A-Z0-9]+)>", // 9 mention
    ":([a-z0-9_+'-]+):", // 10 emoji
    "(https?://[^\\s<>]*[^\\s<>.,;:!?)\\]'\"])", // 11 bare URL
  ].join("|"),
  "g",
);

function mdInline(text, ctx, parent) {
  let last = 0;
  for (const m of text.matchAll(MD_INLINE)) {
    if (m.index < last) continue;
    if (m.index > last) parent.append(emojiText(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[1] !== undefined) parent.append(h("code", "code", m[1]));
    else if (m[2] !== undefined || m[3] !== undefined) mdInline(m[2] ?? m[3], ctx, parent.appendChild(h("b")));
    else if (m[4] !== undefined || m[5] !== undefined) mdInline(m[4] ?? m[5], ctx, parent.appendChild(h("i")));
    else if (m[6] !== undefined) mdInline(m[6], ctx, parent.appendChild(h("s")));
    else if (m[7] !== undefined) parent.append(link(m[8], m[7], ctx));
    else if (m[9] !== undefined) parent.append(mention(m[9], "", ctx));
    else if (m[10] !== undefined) parent.append(emojiNode(m[10]) ?? m[0]);
    else if (m[11] !== undefined) parent.append(link(m[11], m[11], ctx));
  }
  if (last < text.length) parent.append(emojiText(text.slice(last)));
}

/** Markdown as a `<div class="markdown">`: headings, lists, quotes, code fences, paragraphs. */
export function markdown(text, ctx) {
  const root = h("div", "markdown");
  let list = null;
  let para = null;
  let fence = null;
  for (const line of String(text ?? "").split("\n")) {
    if (fence) {
      if (/^\s*```/.test(line)) fence = null;
      else fence.textContent += (fence.textContent ? "\n" : "") + line;
      continue;
    }
    if (/^\s*```/.test(line)) {
      fence = root.appendChild(h("pre", "code-block", ""));
      list = para = null;
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    const item = /^\s*(?:[-*+•]|(\d+)[.)])\s+(.*)$/.exec(line);
    const quote = /^>\s?(.*)$/.exec(line);
    if (heading) {
      mdInline(heading[2], ctx, root.appendChild(h("div", "md-h" + heading[1].length)));
      list = para = null;
    } else if (item) {
      const kind = item[1] ? "ol" : "ul";
      if (!list || list.tagName.toLowerCase() !== kind) list = root.appendChild(h(kind, "md-list"));
      mdInline(item[2], ctx, list.appendChild(h("li")));
      para = null;
    } else if (quote) {
      mdInline(quote[1], ctx, root.appendChild(h("blockquote", "quote")));
      list = para = null;
    } else if (!line.trim()) {
      list = para = null;
    } else {
      if (para) para.append(h("br"));
      else para = root.appendChild(h("p", "md-p"));
      mdInline(line, ctx, para);
      list = null;
    }
  }
  return root;
}
