// Block Kit as Slack draws it: section, header, divider, context, actions, context_actions
// (feedback and icon buttons), input, image, rich_text and markdown blocks, with buttons,
// menus, pickers, checkboxes and text inputs.
//
// `ctx` carries what a surface needs: people and channels (for mentions), `act(block, element,
// value)` for interactive elements, `confirm(obj)`, and for inputs the view's `state` values,
// the values typed before a redraw (`restore`), the `errors` under fields and an `inputs` list
// the surface reads back on submit.
import { emojiChar, emojiNode, emojiText } from "./emoji.js";
import { link, markdown, mention, mrkdwn, plainNode, plainText, textObject } from "./mrkdwn.js";

const h = (tag, cls, text) => {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined) el.textContent = text;
  return el;
};

let uid = 0;

/** Blocks into a `<div class="blocks">`. */
export function renderBlocks(blocks, ctx) {
  const root = h("div", "blocks");
  for (const block of blocks || []) root.append(renderBlock(block, ctx));
  return root;
}

const BLOCKS = {
  section(block, ctx) {
    const el = h("div", "bk-section");
    const body = el.appendChild(h("div", "bk-section-body"));
    if (block.text) body.append(textObject(block.text, ctx));
    if (block.fields) {
      const fields = body.appendChild(h("div", "bk-fields"));
      for (const f of block.fields) fields.appendChild(h("div", "bk-field")).append(textObject(f, ctx));
    }
    if (block.accessory) {
      el.appendChild(h("div", "bk-accessory")).append(element(block.accessory, block, ctx));
    }
    return el;
  },
  header(block) {
    const el = h("div", "bk-header");
    el.append(plainNode(block.text));
    return el;
  },
  divider() {
    return h("hr", "bk-divider");
  },
  context(block, ctx) {
    const el = h("div", "bk-context");
    for (const e of block.elements || []) {
      if (e.type === "image") el.append(image(e, "bk-context-image"));
      else el.append(textObject(e, ctx));
    }
    return el;
  },
  actions(block, ctx) {
    const el = h("div", "bk-actions");
    for (const e of block.elements || []) el.append(element(e, block, ctx));
    return el;
  },
  context_actions(block, ctx) {
    const el = h("div", "bk-context-actions");
    for (const e of block.elements || []) {
      if (e.type === "feedback_buttons") el.append(feedbackButtons(e, block, ctx));
      else if (e.type === "icon_button") {
        const shown = !e.visible_to_user_ids || e.visible_to_user_ids.includes(ctx.me);
        if (shown) el.append(iconButton(e, block, ctx));
      } else el.append(h("span", "bk-unknown", `[${e.type}]`));
    }
    return el;
  },
  input(block, ctx) {
    const el = h("div", "bk-input");
    const label = el.appendChild(h("label", "bk-label"));
    label.append(plainNode(block.label));
    if (block.optional) label.appendChild(h("span", "bk-optional", " (optional)"));
    const field = block.element || {};
    el.append(element(field, block, ctx));
    if (block.hint) el.appendChild(h("div", "bk-hint")).append(textObject(block.hint, ctx));
    if (block.dispatch_action && field.type && field.type.endsWith("input")) {
      el.append(h("div", "bk-hint", "Press Enter to send"));  // as Slack hints under such inputs
    }
    const error = ctx.errors && ctx.errors[block.block_id];
    if (error) {
      el.classList.add("has-error");
      el.appendChild(h("div", "bk-error")).append(emojiChar("⚠️", "warning"), error);
    }
    return el;
  },
  image(block) {
    const el = h("figure", "bk-image");
    if (block.title) el.appendChild(h("figcaption")).append(plainNode(block.title));
    el.append(image(block, "bk-image-img"));
    return el;
  },
  rich_text(block, ctx) {
    const el = h("div", "bk-rich-text");
    for (const part of block.elements || []) el.append(richPart(part, ctx));
    return el;
  },
  markdown(block, ctx) {
    return markdown(block.text, ctx);
  },
};

export function renderBlock(block, ctx) {
  const draw = BLOCKS[block.type];
  if (!draw) return h("div", "bk-unknown", `[${block.type} block]`);
  const el = draw(block, ctx);
  el.dataset.blockId = block.block_id || "";
  return el;
}

function image(obj, cls) {
  const img = h("img", cls);
  img.alt = obj.alt_text || "";
  img.title = obj.alt_text || "";
  img.src = obj.image_url || "";
  img.addEventListener("error", () => {
    const missing = h("span", "bk-image-missing");
    missing.append(emojiChar("🖼️", "frame_with_picture"), img.alt);
    img.replaceWith(missing);
  });
  return img;
}

// ----- rich_text (what people type) -----------------------------------------------------------

function richPart(part, ctx) {
  if (part.type === "rich_text_section") return richElements(part.elements, ctx, h("div", "rt-section"));
  if (part.type === "rich_text_preformatted") return richElements(part.elements, ctx, h("pre", "code-block"));
  if (part.type === "rich_text_quote") return richElements(part.elements, ctx, h("blockquote", "quote"));
  if (part.type === "rich_text_list") {
    const list = h(part.style === "ordered" ? "ol" : "ul", "md-list");
    for (const item of part.elements || []) list.append(richElements(item.elements, ctx, h("li")));
    return list;
  }
  return h("span", "bk-unknown", `[${part.type}]`);
}

function richElements(elements, ctx, parent) {
  for (const e of elements || []) {
    let node;
    // Slack's client turns typed :codes: into emoji elements; this workspace keeps them as text
    if (e.type === "text") node = e.style && e.style.code ? document.createTextNode(e.text || "") : emojiText(e.text || "", true);
    else if (e.type === "user") node = mention(e.user_id, "", ctx);
    else if (e.type === "usergroup") node = h("span", "mention", "@group");
    else if (e.type === "channel") node = mrkdwn(`<#${e.channel_id}>`, ctx);
    else if (e.type === "link") node = link(e.url, e.text || e.url, ctx);
    else if (e.type === "emoji") node = e.unicode ? emojiChar(String.fromCodePoint(...e.unicode.split("-").map((c) => parseInt(c, 16))), e.name) : emojiNode(e.name) ?? document.createTextNode(`:${e.name}:`);
    else if (e.type === "broadcast") node = h("span", "mention mention-me", "@" + e.range);
    else node = document.createTextNode("");
    parent.append(styled(node, e.style));
  }
  return parent;
}

function styled(node, style) {
  if (!style) return node;
  let out = node;
  for (const [key, tag] of [["code", "code"], ["strike", "s"], ["italic", "i"], ["bold", "b"]]) {
    if (!style[key]) continue;
    const wrap = h(tag, key === "code" ? "code" : "");
    wrap.append(out);
    out = wrap;
  }
  return out;
}

// ----- elements ---------------------------------------------------------------------------------

/** The raw value in a `state.values` entry: text, an option's value, ids, a date. */
export function entryRaw(entry) {
  if (!entry) return undefined;
  for (const [key, value] of Object.entries(entry)) {
    if (key === "type" || value === null || value === undefined) continue;
    if (Array.isArray(value)) return value.map((o) => (o && typeof o === "object" ? o.value : o));
    if (typeof value === "object") return value.value;
    return value;
  }
  return undefined;
}

function startValue(el, block, ctx) {
  const typed = ctx.restore && ctx.restore[block.block_id];
  if (typed && el.action_id in typed) return typed[el.action_id];
  const stored = ctx.state && ctx.state[block.block_id];
  const raw = stored ? entryRaw(stored[el.action_id]) : undefined;
  if (raw !== undefined) return raw;
  if (el.initial_value !== undefined) return el.initial_value;
  if (el.initial_option) return el.initial_option.value;
  if (el.initial_options) return el.initial_options.map((o) => o.value);
  for (const key of ["initial_user", "initial_conversation", "initial_channel", "initial_date", "initial_time"]) {
    if (el[key] !== undefined) return el[key];
  }
  for (const key of ["initial_users", "initial_conversations", "initial_channels"]) {
    if (el[key] !== undefined) return el[key];
  }
  return undefined;
}

function optionsOf(el) {
  const groups = el.option_groups || [{ options: el.options || [] }];
  return groups.flatMap((g) => g.options || []);
}

function select(el, block, ctx, choices, multiple) {
  const sel = h("select", "bk-select");
  sel.multiple = multiple;
  if (!multiple) {
    const placeholder = sel.appendChild(h("option", "", plainText(el.placeholder) || "Select an item"));
    placeholder.value = "";
    placeholder.disabled = true;
  }
  for (const [value, label] of choices) {
    const opt = sel.appendChild(h("option", "", label));
    opt.value = value;
  }
  const start = startValue(el, block, ctx);
  if (multiple) {
    for (const opt of sel.options) opt.selected = (start || []).includes(opt.value);
  } else {
    sel.value = start ?? "";
  }
  const read = () => (multiple ? [...sel.selectedOptions].map((o) => o.value) : sel.value || null);
  return interactive(sel, el, block, ctx, read, "change");
}

function textInput(el, block, ctx, type) {
  const box = el.multiline ? h("textarea", "bk-text") : h("input", "bk-text");
  if (!el.multiline) box.type = type;
  if (el.placeholder) box.placeholder = plainText(el.placeholder);
  if (el.max_length) box.maxLength = el.max_length;
  box.value = startValue(el, block, ctx) ?? "";
  const read = () => box.value;
  if (dispatches(block, el)) {
    const onEnter = !(el.dispatch_action_config?.trigger_actions_on || []).includes("on_character_entered");
    box.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && onEnter) {
        ev.preventDefault();
        if (box.value.trim()) ctx.act(block, el, box.value);
      }
    });
  }
  register(ctx, block, el, read);
  return box;
}

function dispatches(block, el) {
  return block.type !== "input" || block.dispatch_action === true || el.dispatch_action_config;
}

function register(ctx, block, el, read) {
  if (block.type === "input" && ctx.inputs) ctx.inputs.push({ blockId: block.block_id, actionId: el.action_id, read });
}

/** Wire an element: inputs report to the surface; elsewhere (and with dispatch_action) a
 * change is sent to the app at once. */
function interactive(node, el, block, ctx, read, event) {
  register(ctx, block, el, read);
  if (dispatches(block, el)) {
    node.addEventListener(event, () => {
      const value = read();
      if (value !== null && value !== "") ctx.act(block, el, value);
    });
  }
  return node;
}

function choices(el, block, ctx, kind) {
  const wrap = h("div", "bk-choices");
  const name = `choice-${++uid}`;
  const start = startValue(el, block, ctx);
  const boxes = [];
  for (const opt of optionsOf(el)) {
    const row = wrap.appendChild(h("label", "bk-choice"));
    const box = row.appendChild(h("input"));
    box.type = kind;
    box.name = name;
    box.value = opt.value;
    box.checked = kind === "checkbox" ? (start || []).includes(opt.value) : start === opt.value;
    const text = row.appendChild(h("span", "bk-choice-text"));
    text.append(textObject(opt.text, ctx));
    if (opt.description) text.appendChild(h("div", "bk-hint")).append(textObject(opt.description, ctx));
    boxes.push(box);
  }
  const read = () => {
    const picked = boxes.filter((b) => b.checked).map((b) => b.value);
    return kind === "checkbox" ? picked : picked[0] ?? null;
  };
  return interactive(wrap, el, block, ctx, read, "change");
}

function button(el, block, ctx) {
  const b = h("button", "bk-button" + (el.style ? ` bk-${el.style}` : ""));
  b.append(plainNode(el.text, "bk-button-text"));
  if (el.accessibility_label) b.setAttribute("aria-label", el.accessibility_label);
  return clicks(b, el, block, ctx, el.value ?? null);
}

/** On click: the confirm dialog if any, then the action sent to the app as `value`. */
function clicks(b, el, block, ctx, value, after) {
  b.type = "button";
  b.addEventListener("click", async () => {
    if (el.confirm && !(await ctx.confirm(el.confirm))) return;
    if (el.url) window.open(el.url, "_blank", "noopener");
    b.disabled = true;
    try {
      const answer = await ctx.act(block, el, value);
      if (after && !(answer && answer.ok === false)) after();  // marked once the app has it
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

/** Slack's 👍/👎 pair: two small borderless buttons; a click sends the element with the
 * side clicked ("positive" or "negative"), and the clicked one stays marked. */
function feedbackButtons(el, block, ctx) {
  const group = h("span", "bk-feedback");
  group.setAttribute("role", "group");
  const sides = [["positive", el.positive_button || {}], ["negative", el.negative_button || {}]];
  for (const [side, obj] of sides) {
    const b = h("button", `bk-icon-button bk-feedback-${side}`);
    b.append(plainNode(obj.text, "bk-button-text"));
    b.title = obj.accessibility_label || plainText(obj.text);
    b.setAttribute("aria-label", b.title);
    b.setAttribute("aria-pressed", "false");
    group.append(clicks(b, el, block, ctx, side, () => {
      for (const other of group.querySelectorAll("button")) other.setAttribute("aria-pressed", String(other === b));
    }));
  }
  return group;
}

/** An icon button (the trash icon is Slack's only one), with its text beside the icon. */
function iconButton(el, block, ctx) {
  const b = h("button", "bk-icon-button");
  b.append(emojiNode(el.icon === "trash" ? "wastebasket" : String(el.icon)) ?? "", plainNode(el.text, "bk-button-text"));
  b.title = el.accessibility_label || plainText(el.text);
  b.setAttribute("aria-label", b.title);
  return clicks(b, el, block, ctx, el.value ?? null);
}

function element(el, block, ctx) {
  const people = () => [...ctx.people.values()].filter((p) => !p.is_bot).map((p) => [p.id, p.real_name || p.name]);
  const channels = () => [...ctx.channels.values()].filter((c) => !c.is_im).map((c) => [c.id, "#" + c.name]);
  switch (el.type) {
    case "button":
      return button(el, block, ctx);
    case "static_select":
    case "external_select":
      return select(el, block, ctx, optionsOf(el).map((o) => [o.value, plainText(o.text)]), false);
    case "multi_static_select":
    case "multi_external_select":
      return select(el, block, ctx, optionsOf(el).map((o) => [o.value, plainText(o.text)]), true);
    case "overflow":
      return select({ ...el, placeholder: { type: "plain_text", text: "⋯" } }, block, ctx, optionsOf(el).map((o) => [o.value, plainText(o.text)]), false);
    case "users_select":
      return select(el, block, ctx, people(), false);
    case "multi_users_select":
      return select(el, block, ctx, people(), true);
    case "conversations_select":
    case "channels_select":
      return select(el, block, ctx, channels(), false);
    case "multi_conversations_select":
    case "multi_channels_select":
      return select(el, block, ctx, channels(), true);
    case "checkboxes":
      return choices(el, block, ctx, "checkbox");
    case "radio_buttons":
      return choices(el, block, ctx, "radio");
    case "plain_text_input":
    case "rich_text_input":
      return textInput(el, block, ctx, "text");
    case "number_input":
      return textInput(el, block, ctx, "number");
    case "email_text_input":
      return textInput(el, block, ctx, "email");
    case "url_text_input":
      return textInput(el, block, ctx, "url");
    case "datepicker":
      return picker(el, block, ctx, "date");
    case "timepicker":
      return picker(el, block, ctx, "time");
    case "image":
      return image(el, "bk-accessory-image");
    default:
      return h("span", "bk-unknown", `[${el.type}]`);
  }
}

function picker(el, block, ctx, type) {
  const input = h("input", "bk-text bk-picker");
  input.type = type;
  input.value = startValue(el, block, ctx) ?? "";
  return interactive(input, el, block, ctx, () => input.value || null, "change");
}
