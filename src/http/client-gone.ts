import type { FastifyReply } from 'fastify';

/**
 * A signal that aborts when the client goes away before the response to
 * its request is sent: its connection closed while the handler still works
 * (a test call of a tool waiting for the tool's answer, say), so that the
 * work it started for nobody stops at once rather than at its own
 * timeout. A response that was sent closes too; that does not abort.
 */
export function clientGoneSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const response = reply.raw;
  response.once('close', () => {
    if (!response.writableFinished) controller.abort(new Error('the client went away'));
  });
  return controller.signal;
}
