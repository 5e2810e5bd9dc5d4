// Emoji shortcodes Slack renders as pictures; unknown codes stay as typed (":name:").
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
};

/** The picture for a shortcode (`smile` or `smile::skin-tone-2`), or null when unknown. */
export function emoji(name) {
  const base = name.split("::")[0];
  return Object.prototype.hasOwnProperty.call(EMOJI, base) ? EMOJI[base] : null;
}

/** Replace `:shortcode:` in plain text (plain_text objects with `emoji: true`). */
export function emojify(text) {
  return text.replace(/:([a-z0-9_+'-]+(?:::skin-tone-\d)?):/g, (m, name) => emoji(name) ?? m);
}
