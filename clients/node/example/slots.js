// Exports limited by sluice to 2 at once per tenant (rule exports of
// sluice.yaml): each holds a slot while it runs, kept past its lease by
// keepAlive, and released when it ends, however it ends. Put sluice.js
// beside this file, start sluice serve with sluice.yaml, then:
//
//   node slots.js     # export 3, asked for while 1 and 2 run, is refused
const sluice = require('./sluice');

const limiter = sluice.client({ url: process.env.SLUICE_URL || 'http://127.0.0.1:8080' });

// runExport runs work while it holds one of tenant's export slots; it
// resolves to false, running nothing, while both are held.
async function runExport(tenant, work) {
  const lease = await limiter.acquire({ rule: 'exports', key: tenant });
  if (!lease.allowed) {
    return false; // lease.retryAfter: the seconds until a lease ends, at the latest
  }
  const stop = limiter.keepAlive(lease); // renews every third of lease.ttl (30s)
  try {
    await work();
  } finally {
    stop();
    await limiter.release(lease); // the slot is free, on every replica of sluice
  }
  return true;
}

async function main() {
  const tenant = 'tenant-7';
  await runExport(tenant, async () => {
    console.log('export 1 running');
    await runExport(tenant, async () => {
      console.log('export 2 running');
      if (!(await runExport(tenant, async () => console.log('export 3 running')))) {
        console.log('export 3 refused: 2 exports running');
      }
    });
  });
  await runExport(tenant, async () => console.log('export 3 running')); // 1 and 2 have ended
  limiter.close();
}

main().catch((err) => {
  console.error(err.message);
  process.exitCode = 1;
});
