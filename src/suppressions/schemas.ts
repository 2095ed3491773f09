import { z } from 'zod';

export const addSuppressionSchema = z.object({
  emailAddress: z.string().trim().min(3).max(320).email(),
  reason: z.string().trim().min(1).max(100).optional(),
  detail: z.string().max(1000).optional(),
});
export type AddSuppressionInput = z.infer<typeof addSuppressionSchema>;

export const listSuppressionsSchema = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  /** Opaque cursor from the previous page's `paginationCursorNext`. */
  paginationCursorNext: z.string().max(500).optional(),
});
export type ListSuppressionsInput = z.infer<typeof listSuppressionsSchema>;
