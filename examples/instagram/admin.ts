import type { Router } from 'shardflake';

/**
 * The admin page's numbers: questions about the whole service, answered across every shard by `router.sql`
 * (one statement per server, combined in the router; docs/sql.md). Each is exact — a query router.sql could not
 * answer exactly would be refused, not estimated.
 */
export interface AdminReport {
  totals: { users: bigint; photos: bigint; posters: bigint; likes: bigint | null; mostLiked: number | null };
  /** The users whose photos got the most likes (photos are on their user's shard, so the join runs per shard). */
  topPosters: { name: string; photos: bigint; likes: bigint | null }[];
}

export async function adminReport(router: Router, top = 5): Promise<AdminReport> {
  const [users, photos, posters] = await Promise.all([
    router.sql('SELECT count(*) AS users FROM users'),
    router.sql(
      `SELECT count(*) AS photos, count(DISTINCT user_id) AS posters, sum(like_count) AS likes,
              max(like_count) AS most_liked
         FROM photos`,
    ),
    router.sql(
      `SELECT u.name, count(p.id) AS photos, sum(p.like_count) AS likes
         FROM users u JOIN photos p ON p.user_id = u.id
        GROUP BY u.name
        ORDER BY likes DESC, u.name
        LIMIT $1`,
      [top],
    ),
  ]);
  const p = photos.rows[0] as {
    photos: bigint;
    posters: bigint;
    likes: bigint | null;
    most_liked: number | null;
  };
  return {
    totals: {
      users: users.rows[0]?.users as bigint,
      photos: p.photos,
      posters: p.posters,
      likes: p.likes,
      mostLiked: p.most_liked,
    },
    topPosters: posters.rows as AdminReport['topPosters'],
  };
}
