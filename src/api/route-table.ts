import type { FastifyInstance } from "fastify";

/** One registered path pattern (fastify's `:param` / `*` syntax) and the methods it answers. */
export interface RegisteredRoute {
  url: string;
  methods: Set<string>;
  pattern: RegExp;
}

function patternOf(url: string): RegExp {
  const escaped = url.split("/").map((segment) => {
    if (segment === "*") return ".*";
    if (segment.startsWith(":")) return "[^/]+";
    return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  });
  return new RegExp(`^${escaped.join("/")}$`);
}

/**
 * Every route the app registers, collected from fastify's onRoute hook: the not-found handler
 * answers 405 with `Allow` for a path that exists under other methods, and the docs test
 * compares it with the route tables of README.md and docs/api.md.
 */
export class RouteTable {
  private readonly routes = new Map<string, RegisteredRoute>();

  watch(app: FastifyInstance): void {
    app.addHook("onRoute", (route) => {
      // The CORS preflight's catch-all would make every unknown path "exist".
      if (route.url === "*") return;
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      const entry = this.routes.get(route.url) ?? {
        url: route.url,
        methods: new Set<string>(),
        pattern: patternOf(route.url),
      };
      for (const method of methods) entry.methods.add(method.toUpperCase());
      this.routes.set(route.url, entry);
    });
  }

  all(): RegisteredRoute[] {
    return [...this.routes.values()];
  }

  /** The methods some route answers for this concrete path, sorted; empty: no route has the path. */
  allowedFor(path: string): string[] {
    const methods = new Set<string>();
    for (const route of this.routes.values()) {
      if (route.pattern.test(path)) for (const m of route.methods) methods.add(m);
    }
    return [...methods].sort();
  }
}
