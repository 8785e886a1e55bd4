/**
 * DOM helpers: elements are built with `h()` and text nodes only (no innerHTML), so nothing the
 * service answers can become markup. Formatting of money (micro-USD), dates and counts.
 */

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/**
 * `h("button", {type: "button", onclick: fn}, "Revoke")`: `on*` attributes become listeners,
 * `false`/`null`/`undefined` attributes are left out, `true` sets an empty attribute.
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, ...children);
  return el;
}

export function append(el: Element, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces the children of `el`. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

let ids = 0;
/** A unique element id (labels point at inputs with it). */
export function uid(prefix: string): string {
  return `${prefix}-${++ids}`;
}

/** A labelled field: `<label for>` + the control; returns the wrapper and the control. */
export function field<T extends HTMLInputElement | HTMLSelectElement>(
  label: string,
  control: T,
  hint?: string,
): HTMLElement {
  control.id ||= uid("f");
  const wrap = h("div", { class: "field" }, h("label", { for: control.id }, label), control);
  if (hint) {
    const hintId = uid("hint");
    control.setAttribute("aria-describedby", hintId);
    append(wrap, h("small", { id: hintId, class: "hint" }, hint));
  }
  return wrap;
}

/** A `<select>` of `[value, label]` pairs. */
export function select(name: string, options: Array<[string, string]>, value = ""): HTMLSelectElement {
  const el = h("select", { name });
  for (const [v, label] of options) el.append(h("option", { value: v, selected: v === value }, label));
  return el;
}

/** A status line for errors and confirmations (`role=alert` for errors, `status` otherwise). */
export function notice(kind: "error" | "ok", text: string): HTMLElement {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** A table inside a horizontally scrollable, labelled region (phones). */
export function table(caption: string, head: string[], rows: HTMLTableRowElement[], empty: string): HTMLElement {
  const body = h("tbody");
  if (rows.length === 0) body.append(h("tr", {}, h("td", { colspan: head.length, class: "empty" }, empty)));
  else body.append(...rows);
  return h(
    "div",
    { class: "table-wrap", role: "region", "aria-label": caption, tabindex: 0 },
    h(
      "table",
      {},
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, ...head.map((c) => h("th", { scope: "col" }, c)))),
      body,
    ),
  );
}

export function row(...cells: Child[]): HTMLTableRowElement {
  return h("tr", {}, ...cells.map((c) => h("td", {}, c)));
}

/** Micro-USD → `$4.999990` (all six decimals: a request costs fractions of a cent). */
export function usd(micros: number): string {
  const sign = micros < 0 ? "-" : "";
  const abs = Math.abs(Math.round(micros));
  const whole = Math.floor(abs / 1e6);
  const frac = String(abs % 1e6).padStart(6, "0");
  return `${sign}$${whole.toLocaleString("en-US")}.${frac}`;
}

/** ISO 8601 → local `YYYY-MM-DD HH:MM:SS`; empty for null. */
export function when(iso: string | null | undefined): string {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function count(n: number): string {
  return n.toLocaleString("en-US");
}

/** A status badge: `completed`, `failed`, … with a class per status. */
export function badge(status: string): HTMLElement {
  return h("span", { class: `badge s-${status.replace(/[^a-z_]/g, "")}` }, status);
}
