// Internal class of smtp-server (no published types); used only by submission-server.ts.
declare module 'smtp-server/lib/smtp-connection.js' {
  export const SMTPConnection: new (server: unknown, socket: unknown, options: unknown) => unknown;
}
