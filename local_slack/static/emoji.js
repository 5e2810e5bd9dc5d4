// Emoji as Slack shows them: shortcodes (`:thumbsup:`) and emoji characters drawn as
// pictures – the page's own (emoji-pictures.js), so they never depend on an emoji font –
// or, for an emoji without one, as its character; unknown codes stay as typed (":name:").
import { PICTURES } from "./emoji-pictures.js";

export const EMOJI = {
  "+1": "👍", thumbsup: "👍", "-1": "👎", thumbsdown: "👎", ok_hand: "👌", clap: "👏",
  wave: "👋", raised_hand: "✋", hand: "✋", point_right: "👉", point_left: "👈",
  point_up: "☝️", point_down: "👇", pray: "🙏", muscle: "💪", writing_hand: "✍️",
  eyes: "👀", brain: "🧠", smile: "😄", smiley: "😃", grinning: "😀", slightly_smiling_face: "🙂",
  simple_smile: "🙂", wink: "😉", joy: "😂", laughing: "😆", sweat_smile: "😅",
  thinking_face: "🤔", neutral_face: "😐", confused: "😕", cry: "😢", scream: "😱",
  sunglasses: "😎", heart_eyes: "😍", partying_face: "🥳", robot_face: "🤖", robot: "🤖",
  ghost: "👻", skull: "💀", detective: "🕵️", sleuth_or_spy: "🕵️", technologist: "🧑‍💻",
  heart: "❤️", broken_heart: "💔", fire: "🔥", star: "⭐", star2: "🌟", sparkles: "✨",
  zap: "⚡", boom: "💥", tada: "🎉", confetti_ball: "🎊", rocket: "🚀", trophy: "🏆",
  medal: "🏅", "100": "💯", white_check_mark: "✅", heavy_check_mark: "✔️",
  ballot_box_with_check: "☑️", x: "❌", heavy_multiplication_x: "✖️",
  negative_squared_cross_mark: "❎", warning: "⚠️", no_entry: "⛔", no_entry_sign: "🚫",
  stop_sign: "🛑", exclamation: "❗", heavy_exclamation_mark: "❗", question: "❓",
  grey_question: "❔", information_source: "ℹ️", bulb: "💡", bell: "🔔", mega: "📣",
  loudspeaker: "📢", speech_balloon: "💬", thought_balloon: "💭", mag: "🔍",
  mag_right: "🔎", memo: "📝", pencil: "📝", pencil2: "✏️", page_facing_up: "📄",
  page_with_curl: "📃", clipboard: "📋", bookmark_tabs: "📑", books: "📚", book: "📖",
  notebook: "📓", newspaper: "📰", scroll: "📜", bar_chart: "📊",
  chart_with_upwards_trend: "📈", chart_with_downwards_trend: "📉", calendar: "📆",
  date: "📅", spiral_calendar_pad: "🗓️", email: "📧", envelope: "✉️", inbox_tray: "📥",
  outbox_tray: "📤", mailbox: "📫", package: "📦", link: "🔗", paperclip: "📎",
  pushpin: "📌", round_pushpin: "📍", lock: "🔒", unlock: "🔓", key: "🔑", gear: "⚙️",
  wrench: "🔧", hammer: "🔨", hammer_and_wrench: "🛠️", toolbox: "🧰", microscope: "🔬",
  telescope: "🔭", test_tube: "🧪", moneybag: "💰", dollar: "💵", money_with_wings: "💸",
  credit_card: "💳", briefcase: "💼", office: "🏢", globe_with_meridians: "🌐",
  earth_americas: "🌎", earth_africa: "🌍", world_map: "🗺️", hourglass: "⌛",
  hourglass_flowing_sand: "⏳", stopwatch: "⏱️", alarm_clock: "⏰", clock: "🕐",
  arrows_counterclockwise: "🔄", repeat: "🔁", arrow_right: "➡️", arrow_left: "⬅️",
  arrow_up: "⬆️", arrow_down: "⬇️", arrow_forward: "▶️", pause_button: "⏸️",
  double_vertical_bar: "⏸️", black_right_pointing_double_triangle_with_vertical_bar: "⏭️",
  next_track_button: "⏭️", fast_forward: "⏩", stop_button: "⏹️", red_circle: "🔴",
  large_green_circle: "🟢", large_yellow_circle: "🟡", large_blue_circle: "🔵",
  white_circle: "⚪", black_circle: "⚫", large_orange_circle: "🟠", checkered_flag: "🏁",
  triangular_flag_on_post: "🚩", label: "🏷️", art: "🎨", computer: "💻", keyboard: "⌨️",
  desktop_computer: "🖥️", iphone: "📱", floppy_disk: "💾", cd: "💿", satellite: "🛰️",
  coffee: "☕", pizza: "🍕", cake: "🍰", beer: "🍺", seedling: "🌱", evergreen_tree: "🌲",
  sunny: "☀️", cloud: "☁️", umbrella: "☂️", snowflake: "❄️", rainbow: "🌈", ship: "🚢",
  boat: "⛵", sailboat: "⛵", anchor: "⚓", compass: "🧭", dart: "🎯", jigsaw: "🧩",
  crystal_ball: "🔮", shield: "🛡️", crossed_swords: "⚔️", handshake: "🤝",
  busts_in_silhouette: "👥", bust_in_silhouette: "👤", people_holding_hands: "🧑‍🤝‍🧑",
  sos: "🆘", new: "🆕", free: "🆓", ok: "🆗", up: "🆙", cool: "🆒", soon: "🔜",
  wastebasket: "🗑️", eye: "👁️", frame_with_picture: "🖼️", speech_balloon_left: "🗨️",
};

/** The emoji character for a shortcode (`smile` or `smile::skin-tone-2`), or null when unknown. */
export function emoji(name) {
  const base = name.split("::")[0];
  return Object.prototype.hasOwnProperty.call(EMOJI, base) ? EMOJI[base] : null;
}

/** Replace `:shortcode:` in plain text with emoji characters (for text-only places). */
export function emojify(text) {
  return text.replace(SHORTCODE, (m, name) => emoji(name) ?? m);
}

const SHORTCODE = /:([a-z0-9_+'-]+(?:::skin-tone-\d)?):/g;
const VS16 = "\uFE0F";
const NAMES = new Map();  // character -> its first shortcode, for labels
for (const [name, char] of Object.entries(EMOJI)) {
  const key = char.replaceAll(VS16, "");
  if (!NAMES.has(key)) NAMES.set(key, name);
}
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const DRAWN = `(?<char>(?:${Object.keys(PICTURES).sort((a, b) => b.length - a.length).map(escape).join("|")})${VS16}?)`;
const DRAWN_ONLY = new RegExp(DRAWN, "gu");
const CODE_OR_DRAWN = new RegExp(`:(?<code>[a-z0-9_+'-]+(?:::skin-tone-\\d)?):|${DRAWN}`, "gu");
const svgs = new Map();  // character -> parsed <svg>, cloned for each use

function svgFor(char) {
  if (!svgs.has(char)) {
    const markup = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 36 36" aria-hidden="true">${PICTURES[char]}</svg>`;
    const doc = new DOMParser().parseFromString(markup, "image/svg+xml");  // the page's own drawings
    svgs.set(char, document.importNode(doc.documentElement, true));
  }
  return svgs.get(char).cloneNode(true);
}

/** An emoji character as the page's picture (`<span class="emoji">`), or as the character
 * itself (`<span class="emoji emoji-char">`) when the page has no picture for it. */
export function emojiChar(char, name) {
  const key = char.replaceAll(VS16, "");
  const label = name || NAMES.get(key) || key;
  const el = document.createElement("span");
  el.className = "emoji";
  el.setAttribute("role", "img");
  el.setAttribute("aria-label", label);
  el.title = `:${label}:`;
  el.dataset.emoji = key;
  if (Object.prototype.hasOwnProperty.call(PICTURES, key)) el.append(svgFor(key));
  else {
    el.classList.add("emoji-char");
    el.textContent = char;
  }
  return el;
}

/** A shortcode (`thumbsup`, without colons) as an emoji node, or null when unknown. */
export function emojiNode(name) {
  const char = emoji(name);
  return char === null ? null : emojiChar(char, name.split("::")[0]);
}

/** Text with its emoji characters (and, with `shortcodes`, its `:codes:`) drawn as emoji:
 * a fragment of text nodes and emoji nodes. */
export function emojiText(text, shortcodes = false) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(shortcodes ? CODE_OR_DRAWN : DRAWN_ONLY)) {
    const node = m.groups.char ? emojiChar(m.groups.char) : emojiNode(m.groups.code);
    if (!node) continue;  // an unknown :code: stays as typed
    if (m.index > last) out.append(text.slice(last, m.index));
    out.append(node);
    last = m.index + m[0].length;
  }
  if (last < text.length) out.append(text.slice(last));
  return out;
}
