/**
 * GraphiQL at `/graphql` (issue 27, item 7): the `graphiql` package, bundled by Vite with its Monaco
 * workers, fonts and styles, so the page loads nothing from outside the service. Above it, one
 * field for the caller's credential (see ./credential.ts): filled from the dashboard's sign-in
 * when there is one, or an API key pasted by hand. Queries and mutations go over HTTP POST to
 * `/graphql`, subscriptions over graphql-ws on the same path.
 */
import "graphiql/setup-workers/vite";
import "graphiql/style.css";
import "./page.css";
import { GraphiQL } from "graphiql";
import { StrictMode, useState } from "react";
import { createRoot } from "react-dom/client";
import { PAGE_TOKEN_KEY, type TokenSource, initialToken } from "./credential";
import { createFetcher } from "./fetcher";

const first = initialToken(sessionStorage);
/** What the field holds now; read by the fetcher at each operation. */
let field = first.value;

const fetcher = createFetcher(() => field);

/** The first tabs of a new visitor: one query and one subscription of the schema. */
const DEFAULT_TABS = [
  {
    query: `# Run with ▶ or Ctrl+Enter, as the credential
# of the field above. Docs: the book icon.
query Team {
  me {
    email
    role
  }
  team {
    name
    members {
      email
      role
    }
  }
}
`,
  },
  {
    query: `# Your team's completion events, live
# (graphql-ws): run it, then make a request.
subscription Events {
  completionEvents {
    responseId
    model
    status
    promptTokens
    completionTokens
    costMicros
  }
}
`,
  },
];

const HINTS: Record<TokenSource, string> = {
  dashboard: "From your dashboard sign-in.",
  page: "Kept for this tab.",
  none: "None: sign in on the dashboard, or paste an API key.",
};

function Page() {
  const [value, setValue] = useState(first.value);
  const [source, setSource] = useState<TokenSource>(first.source);
  return (
    <>
      <header className="bar">
        <a className="home" href="/dashboard/">
          Switchyard
        </a>
        <label htmlFor="credential">Token or API key</label>
        <input
          id="credential"
          type="password"
          autoComplete="off"
          spellCheck={false}
          placeholder="sk_… or an access token"
          value={value}
          onChange={(event) => {
            field = event.target.value;
            sessionStorage.setItem(PAGE_TOKEN_KEY, field);
            setValue(field);
            setSource(field ? "page" : "none");
          }}
        />
        <span className="hint" role="status">
          {HINTS[source]} An Authorization header in the Headers tab wins.
        </span>
      </header>
      <main className="ide">
        <GraphiQL fetcher={fetcher} defaultTabs={DEFAULT_TABS} />
      </main>
    </>
  );
}

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <Page />
  </StrictMode>,
);
