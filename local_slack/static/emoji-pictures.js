// The page's own emoji pictures: small flat SVG drawings (viewBox 0 0 36 36) made for this
// page, so emoji look right on a machine with no colour emoji font (where the characters
// would be empty boxes). Keyed by the emoji character without its variation selector (U+FE0F).
// It covers what Flotilla and the page itself show, and the reactions people use most; any
// other emoji is shown as its character.

const SQUARE = (color) => `<rect x="2" y="2" width="32" height="32" rx="6" fill="${color}"/>`;
const CIRCLE = (color) => `<circle cx="18" cy="18" r="16" fill="${color}"/>`;
const THUMB =
  '<rect x="3" y="15" width="8" height="19" rx="2" fill="#5DADEC"/>' +
  '<path d="M12 16L18 5c1-2 5-1.5 5 2l-1 7h8c2.5 0 4 2 3.5 4.5L31 30c-.5 2-2 3-4 3H12z" fill="#FFCC4D" stroke="#E8A33B" stroke-width="1.5" stroke-linejoin="round"/>' +
  '<path d="M22 19.5h9M21.5 24.5h8.5M21 29h7.5" stroke="#E8A33B" stroke-width="1.5" stroke-linecap="round" fill="none"/>';
const GLASS = (sand) =>
  '<rect x="7" y="2" width="22" height="4" rx="2" fill="#A0522D"/><rect x="7" y="30" width="22" height="4" rx="2" fill="#A0522D"/>' +
  '<path d="M10 6h16c0 6-5 9-6 12 1 3 6 6 6 12H10c0-6 5-9 6-12-1-3-6-6-6-12z" fill="#E1E8ED" stroke="#99AAB5" stroke-width="1.2"/>' +
  sand;
const LOUPE =
  '<path d="M22 22l10 10" stroke="#31373D" stroke-width="5" stroke-linecap="round"/>' +
  '<circle cx="14" cy="14" r="10" fill="#BBDDF5" stroke="#8899A6" stroke-width="3"/>' +
  '<path d="M9 12a5 5 0 0 1 5-5" stroke="#fff" stroke-width="2" fill="none" stroke-linecap="round"/>';
const CARD = '<rect x="3" y="3" width="30" height="30" rx="3" fill="#E1E8ED"/><path d="M6 29.5h24" stroke="#66757F" stroke-width="1.5"/>';
const FACE = (eyes, mouth) => CIRCLE("#FFCC4D") + eyes + mouth;
const OVAL_EYES = '<ellipse cx="12.5" cy="14" rx="2" ry="3" fill="#664500"/><ellipse cx="23.5" cy="14" rx="2" ry="3" fill="#664500"/>';
const LOOP_ARROWS =
  '<path d="M10 18v-3a4 4 0 0 1 4-4h10M26 18v3a4 4 0 0 1-4 4H12" fill="none" stroke="#fff" stroke-width="3" stroke-linecap="round"/>' +
  '<path d="M23 6.5l5 4.5-5 4.5zM13 20.5l-5 4.5 5 4.5z" fill="#fff"/>';

export const PICTURES = {
  // what Flotilla shows: feedback, the plan card's step marks, forms, warnings, agent icons
  "👍": THUMB,
  "👎": `<g transform="matrix(1 0 0 -1 0 36)">${THUMB}</g>`,
  "✅": SQUARE("#77B255") + '<path d="M9 18.5l6 6L27.5 11" fill="none" stroke="#fff" stroke-width="4.5" stroke-linecap="round" stroke-linejoin="round"/>',
  "✔": '<path d="M6 19l8 8L30 9" fill="none" stroke="#31373D" stroke-width="5" stroke-linecap="round" stroke-linejoin="round"/>',
  "☑": SQUARE("#E1E8ED") + '<path d="M9 18.5l6 6L27.5 11" fill="none" stroke="#3B88C3" stroke-width="4" stroke-linecap="round" stroke-linejoin="round"/>',
  "❌": '<path d="M8 8l20 20M28 8L8 28" stroke="#DD2E44" stroke-width="6" stroke-linecap="round"/>',
  "✖": '<path d="M9 9l18 18M27 9L9 27" stroke="#31373D" stroke-width="5.5" stroke-linecap="round"/>',
  "❎": SQUARE("#77B255") + '<path d="M11 11l14 14M25 11L11 25" stroke="#fff" stroke-width="4" stroke-linecap="round"/>',
  "⏸": SQUARE("#3B88C3") + '<rect x="11" y="9" width="5" height="18" rx="1" fill="#fff"/><rect x="20" y="9" width="5" height="18" rx="1" fill="#fff"/>',
  "⏭": SQUARE("#3B88C3") + '<path d="M7 10v16l9-8zM16 10v16l9-8z" fill="#fff"/><rect x="25" y="10" width="3.5" height="16" fill="#fff"/>',
  "⏩": SQUARE("#3B88C3") + '<path d="M8 10v16l10-8zM18 10v16l10-8z" fill="#fff"/>',
  "▶": SQUARE("#3B88C3") + '<path d="M13 9v18l14-9z" fill="#fff"/>',
  "⏹": SQUARE("#3B88C3") + '<rect x="10" y="10" width="16" height="16" rx="1" fill="#fff"/>',
  "⏳": GLASS('<path d="M12.5 9h11c-1 3-4 5-5.5 7.5C16.5 14 13.5 12 12.5 9z" fill="#FFAC33"/><path d="M18 17v9" stroke="#FFAC33" stroke-width="1"/><path d="M12 29c1-3 4-4 6-4s5 1 6 4z" fill="#FFAC33"/>'),
  "⌛": GLASS('<path d="M11 29.5c1-4 4.5-6 7-6s6 2 7 6z" fill="#FFAC33"/>'),
  "✋":
    '<g fill="#FFCC4D" stroke="#E8A33B" stroke-width="1.2"><rect x="9" y="8" width="4.6" height="16" rx="2.3"/><rect x="14" y="3.5" width="4.6" height="18" rx="2.3"/>' +
    '<rect x="19" y="5" width="4.6" height="17" rx="2.3"/><rect x="24" y="9" width="4.6" height="14" rx="2.3"/><path d="M10 23l-5-6c-1.6-1.9.6-4 2.6-2.6L12 18"/></g>' +
    '<path d="M9.5 17H28v8c0 5.5-3.8 9-9.2 9S9.5 30.5 9.5 25z" fill="#FFCC4D"/>',
  "🔁": SQUARE("#3B88C3") + LOOP_ARROWS,
  "🔄": SQUARE("#3B88C3") + `<g transform="rotate(90 18 18)">${LOOP_ARROWS}</g>`,
  "📎": '<path d="M22 9v15a5 5 0 0 1-10 0V8a3.5 3.5 0 0 1 7 0v15a1.5 1.5 0 0 1-3 0V11" fill="none" stroke="#66757F" stroke-width="2.5" stroke-linecap="round" transform="rotate(30 18 18)"/>',
  "⚠": '<path d="M18 3.5L33.5 31.5h-31z" fill="#FFCC4D" stroke="#FFAC33" stroke-width="2" stroke-linejoin="round"/><rect x="16.2" y="12" width="3.6" height="11" rx="1.8" fill="#231F20"/><circle cx="18" cy="27" r="2.1" fill="#231F20"/>',
  "🔍": LOUPE,
  "🔎": `<g transform="matrix(-1 0 0 1 36 0)">${LOUPE}</g>`,
  "📊": CARD + '<rect x="8" y="17" width="5" height="12" fill="#DD2E44"/><rect x="15.5" y="9" width="5" height="20" fill="#3B88C3"/><rect x="23" y="13" width="5" height="16" fill="#77B255"/>',
  "📈": CARD + '<path d="M7 25l7-7 5 4 9-11" stroke="#DD2E44" stroke-width="2.5" fill="none" stroke-linejoin="round" stroke-linecap="round"/>',
  "📉": CARD + '<path d="M7 10l7 7 5-4 9 11" stroke="#3B88C3" stroke-width="2.5" fill="none" stroke-linejoin="round" stroke-linecap="round"/>',
  "📝":
    '<rect x="5" y="3" width="22" height="30" rx="2" fill="#fff" stroke="#CCD6DD" stroke-width="1.5"/><path d="M9 10h14M9 15h14M9 20h9M9 25h6" stroke="#99AAB5" stroke-width="1.5"/>' +
    '<g transform="rotate(40 26 21)"><rect x="23" y="8" width="6" height="18" fill="#FFAC33"/><rect x="23" y="8" width="6" height="4" fill="#EA596E"/><path d="M23 26h6l-3 6z" fill="#FFD983"/><path d="M25.1 30h1.8l-.9 2z" fill="#292F33"/></g>',
  "📋": '<rect x="5" y="4" width="26" height="30" rx="3" fill="#C1694F"/><rect x="8" y="8" width="20" height="23" fill="#fff"/><rect x="12" y="2" width="12" height="6" rx="2" fill="#99AAB5"/><path d="M11 14h14M11 19h14M11 24h9" stroke="#99AAB5" stroke-width="1.5"/>',
  "📄": '<path d="M7 2h15l7 7v25H7z" fill="#fff" stroke="#CCD6DD" stroke-width="1.5" stroke-linejoin="round"/><path d="M22 2v7h7" fill="#E1E8ED" stroke="#CCD6DD" stroke-width="1.5" stroke-linejoin="round"/><path d="M11 15h14M11 20h14M11 25h10" stroke="#99AAB5" stroke-width="1.5"/>',
  "🗑": '<path d="M8 10h20l-2 23H10z" fill="#99AAB5"/><rect x="6" y="6" width="24" height="4" rx="1" fill="#66757F"/><rect x="14" y="3" width="8" height="3" rx="1" fill="#66757F"/><path d="M13 14v15M18 14v15M23 14v15" stroke="#E1E8ED" stroke-width="1.5"/>',
  // what the page itself shows: private channels, apps, replies, "only visible to you", pictures
  "🔒": '<path d="M11 16v-5a7 7 0 0 1 14 0v5" fill="none" stroke="#AAB8C2" stroke-width="3.5"/><rect x="6" y="15" width="24" height="18" rx="3" fill="#FFAC33"/><circle cx="18" cy="22.5" r="2.5" fill="#744E2C"/><rect x="17" y="23" width="2" height="5" rx="1" fill="#744E2C"/>',
  "🔓": '<path d="M11 16v-5a7 7 0 0 1 14 0" fill="none" stroke="#AAB8C2" stroke-width="3.5" transform="translate(-8 -2)"/><rect x="6" y="15" width="24" height="18" rx="3" fill="#FFAC33"/><circle cx="18" cy="22.5" r="2.5" fill="#744E2C"/><rect x="17" y="23" width="2" height="5" rx="1" fill="#744E2C"/>',
  "🤖":
    '<path d="M18 3v5" stroke="#66757F" stroke-width="2"/><circle cx="18" cy="3.5" r="2.2" fill="#DD2E44"/><rect x="2" y="15" width="4" height="8" rx="1.5" fill="#99AAB5"/><rect x="30" y="15" width="4" height="8" rx="1.5" fill="#99AAB5"/>' +
    '<rect x="5" y="8" width="26" height="22" rx="5" fill="#CCD6DD"/><circle cx="12.5" cy="17" r="3" fill="#3B88C3"/><circle cx="23.5" cy="17" r="3" fill="#3B88C3"/><rect x="11" y="23.5" width="14" height="3" rx="1.5" fill="#66757F"/>',
  "💬": '<path d="M18 4C9.2 4 3 9.4 3 16c0 3.6 1.9 6.8 5 9l-1.5 7 7.5-4.5c1.3.3 2.6.5 4 .5 8.8 0 15-5.4 15-12S26.8 4 18 4z" fill="#fff" stroke="#99AAB5" stroke-width="2" stroke-linejoin="round"/>',
  "👁": '<path d="M2 18c4-7 9.5-11 16-11s12 4 16 11c-4 7-9.5 11-16 11S6 25 2 18z" fill="#fff" stroke="#66757F" stroke-width="2"/><circle cx="18" cy="18" r="6.5" fill="#8A5A3B"/><circle cx="18" cy="18" r="3" fill="#292F33"/><circle cx="20" cy="16" r="1.2" fill="#fff"/>',
  "🖼": '<rect x="2" y="5" width="32" height="26" rx="1" fill="#C1694F"/><rect x="5" y="8" width="26" height="20" fill="#88C9F9"/><path d="M5 28l8-9 6 6 4-4 8 7z" fill="#5C913B"/><circle cx="25" cy="13" r="2.5" fill="#FFCC4D"/>',
  // reactions people use most
  "🎉":
    '<path d="M3 33L10 12l14 14z" fill="#DD2E44"/><path d="M10 12l14 14" stroke="#EA596E" stroke-width="2"/><circle cx="27" cy="8" r="2" fill="#FFCC4D"/><circle cx="31" cy="19" r="1.6" fill="#55ACEE"/>' +
    '<rect x="18" y="4" width="3" height="5" rx="1" fill="#77B255" transform="rotate(20 19.5 6.5)"/><path d="M21 15c3-4 7-5 11-3" stroke="#AA8DD8" stroke-width="2" fill="none" stroke-linecap="round"/><path d="M13 9c0-3 2-5 4-6" stroke="#FFCC4D" stroke-width="2" fill="none" stroke-linecap="round"/>',
  "👀":
    '<ellipse cx="11" cy="18" rx="8" ry="11" fill="#fff" stroke="#66757F" stroke-width="1.5"/><ellipse cx="25" cy="18" rx="8" ry="11" fill="#fff" stroke="#66757F" stroke-width="1.5"/>' +
    '<ellipse cx="13.5" cy="19" rx="3.5" ry="4.5" fill="#292F33"/><ellipse cx="27.5" cy="19" rx="3.5" ry="4.5" fill="#292F33"/>',
  "🚀":
    '<g transform="rotate(45 18 18)"><path d="M11 20l-5 6v4l5-3zM25 20l5 6v4l-5-3z" fill="#DD2E44"/><path d="M13 27h10l-2 6h-6z" fill="#F4900C"/>' +
    '<path d="M18 2c5 4 7 10 7 17v8H11v-8c0-7 2-13 7-17z" fill="#CCD6DD"/><circle cx="18" cy="14" r="3.5" fill="#55ACEE" stroke="#fff" stroke-width="1.2"/></g>',
  "❤": '<path d="M18 32S3 22.5 3 12.5C3 7.8 6.6 4 11 4c3 0 5.5 1.7 7 4.2C19.5 5.7 22 4 25 4c4.4 0 8 3.8 8 8.5C33 22.5 18 32 18 32z" fill="#DD2E44"/>',
  "🔥":
    '<path d="M18 34c-7 0-12-4.5-12-11 0-6 4-9 6-14 1 3 2 5 4 6 0-4 1-9 6-13 0 6 8 9 8 20 0 7-5 12-12 12z" fill="#F4900C"/>' +
    '<path d="M18 34c-4 0-6.5-2.5-6.5-6 0-4 3-6 4-9 1 2 2 3 3.5 3.5C19 20 20 17 22 15c0 4 2.5 6 2.5 12.5 0 3.6-2.6 6.5-6.5 6.5z" fill="#FFCC4D"/>',
  "⭐": '<path d="M18 2.5l4.7 10 10.8 1.4-8 7.5 2.1 10.8L18 26.9l-9.6 5.3 2.1-10.8-8-7.5 10.8-1.4z" fill="#FFAC33"/>',
  "✨": '<path d="M14 4c1 7 3 9 10 10-7 1-9 3-10 10-1-7-3-9-10-10 7-1 9-3 10-10z" fill="#FFAC33"/><path d="M27 20c.6 4 1.8 5.4 6 6-4.2.6-5.4 2-6 6-.6-4-1.8-5.4-6-6 4.2-.6 5.4-2 6-6z" fill="#FFCC4D"/>',
  "💡":
    '<path d="M18 2C11.4 2 7 6.8 7 12.5c0 4.4 2.6 6.6 4 9 .8 1.4 1 3 1 4.5h12c0-1.5.2-3.1 1-4.5 1.4-2.4 4-4.6 4-9C29 6.8 24.6 2 18 2z" fill="#FFD983"/>' +
    '<rect x="12" y="26" width="12" height="6" rx="1.5" fill="#99AAB5"/><path d="M12.5 28.5h11" stroke="#CCD6DD"/><path d="M15 34h6" stroke="#66757F" stroke-width="2.5" stroke-linecap="round"/>',
  "❓": '<path d="M11 12c0-4.5 3.2-7.5 7.3-7.5 4.3 0 7.2 2.8 7.2 6.6 0 5.4-6.5 6-6.5 11" fill="none" stroke="#DD2E44" stroke-width="5" stroke-linecap="round"/><circle cx="19" cy="29.5" r="3" fill="#DD2E44"/>',
  "❔": '<path d="M11 12c0-4.5 3.2-7.5 7.3-7.5 4.3 0 7.2 2.8 7.2 6.6 0 5.4-6.5 6-6.5 11" fill="none" stroke="#CCD6DD" stroke-width="5" stroke-linecap="round"/><circle cx="19" cy="29.5" r="3" fill="#CCD6DD"/>',
  "❗": '<rect x="15" y="3" width="6" height="21" rx="3" fill="#DD2E44"/><circle cx="18" cy="30" r="3.2" fill="#DD2E44"/>',
  "🙂": FACE(OVAL_EYES, '<path d="M11 22c2 3 4.5 4 7 4s5-1 7-4" fill="none" stroke="#664500" stroke-width="2" stroke-linecap="round"/>'),
  "😀": FACE(OVAL_EYES, '<path d="M9 20c0 5 4 9 9 9s9-4 9-9z" fill="#664500"/><path d="M11 20h14v2H11z" fill="#fff"/>'),
  "😄": FACE('<path d="M10 15c1-2.5 4-2.5 5 0M21 15c1-2.5 4-2.5 5 0" stroke="#664500" stroke-width="2" fill="none" stroke-linecap="round"/>', '<path d="M9 19c0 5 4 9 9 9s9-4 9-9z" fill="#664500"/>'),
  "🟢": CIRCLE("#78B159"),
  "🔴": CIRCLE("#DD2E44"),
  "🟡": CIRCLE("#FDCB58"),
  "🔵": CIRCLE("#55ACEE"),
  "🟠": CIRCLE("#F4900C"),
  "⚪": CIRCLE("#E6E7E8"),
  "⚫": CIRCLE("#31373D"),
};
