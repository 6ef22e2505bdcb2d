# syntax=docker/dockerfile:1

# Waymark image: a build stage compiles TypeScript with all dependencies, the
# runtime stage holds production dependencies, the compiled `dist/` and the
# SQL migrations, and runs as the unprivileged `node` user.
#
#   docker build -t waymark .
#   docker run -p 8080:8080 -e DATABASE_URL=postgres://... waymark
#
# Without DATABASE_URL the service starts an embedded PostgreSQL whose data
# lives in WAYMARK_DATA_DIR; mount a volume there to keep it.

ARG NODE_IMAGE=node:20-bookworm-slim
# Node 20 ships npm 10, which ignores package.json's `allowScripts` (npm 11
# install-script approvals) and would run every dependency's install script.
# Same npm as development, so the lockfile and the approvals mean the same.
ARG NPM_VERSION=11.19.1

FROM ${NODE_IMAGE} AS build
ARG NPM_VERSION
RUN npm install --global "npm@${NPM_VERSION}" && npm cache clean --force
WORKDIR /app
# Manifests first: the dependency layer is reused until they change.
COPY package.json package-lock.json ./
RUN npm ci
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM ${NODE_IMAGE} AS runtime
ARG NPM_VERSION
RUN npm install --global "npm@${NPM_VERSION}" && npm cache clean --force
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY migrations ./migrations
# Created in the image and owned by `node`, so a fresh named volume mounted
# here inherits that ownership and the service can write its admin-key file
# (and the embedded cluster, when there is no DATABASE_URL).
RUN mkdir -p /var/lib/waymark && chown node:node /var/lib/waymark && chmod 0700 /var/lib/waymark
ENV HOST=0.0.0.0 \
    PORT=8080 \
    WAYMARK_DATA_DIR=/var/lib/waymark
USER node
VOLUME ["/var/lib/waymark"]
EXPOSE 8080
# Slim images have no curl; Node 20's built-in fetch asks /readyz (database
# reachable, migrations current). PORT is read at check time, so overriding it
# at run time keeps the check right.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# `node` directly, not `npm start`: its prestart hook would rebuild with
# TypeScript, which the runtime stage does not have, and npm would sit between
# the process and SIGTERM.
CMD ["node", "dist/main.js"]
