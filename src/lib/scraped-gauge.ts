import { Gauge, type Registry } from 'prom-client';

/**
 * A gauge read from the database when /metrics is scraped (a count on an index, an age). A read that
 * fails, as on a database closed at shutdown, leaves the last value instead of failing the scrape.
 */
export function scrapedGauge(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      try {
        this.set(read());
      } catch {
        /* database closed */
      }
    },
  });
}
