import java.math.BigDecimal;
import java.math.RoundingMode;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * An in-memory double-entry ledger: every transfer debits one account and credits another,
 * so the sum of all balances is always zero.
 */
public final class Ledger {

    /** Thrown when a transfer would break a ledger rule; the ledger is left unchanged. */
    public static class LedgerException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        public LedgerException(String message) {
            super(message);
        }
    }

    public enum AccountType { ASSET, LIABILITY, INCOME, EXPENSE }

    public record Account(String id, String name, AccountType type, boolean allowNegative) {
        public Account {
            Objects.requireNonNull(id, "id");
            if (id.isBlank()) {
                throw new IllegalArgumentException("account id must not be blank");
            }
        }
    }

    public record Entry(long sequence, Instant at, String from, String to, BigDecimal amount, String memo) {}

    private final Map<String, Account> accounts = new HashMap<>();
    private final Map<String, BigDecimal> balances = new HashMap<>();
    private final List<Entry> journal = new ArrayList<>();
    private long nextSequence = 1;

    public Account open(String id, String name, AccountType type, boolean allowNegative) {
        if (accounts.containsKey(id)) {
            throw new LedgerException("account " + id + " already exists");
        }
        Account account = new Account(id, name, type, allowNegative);
        accounts.put(id, account);
        balances.put(id, BigDecimal.ZERO.setScale(2));
        return account;
    }

    public synchronized Entry transfer(String from, String to, BigDecimal amount, String memo) {
        Account source = find(from).orElseThrow(() -> new LedgerException("unknown account " + from));
        find(to).orElseThrow(() -> new LedgerException("unknown account " + to));
        if (from.equals(to)) {
            throw new LedgerException("cannot transfer from an account to itself");
        }
        if (amount.signum() <= 0) {
            throw new LedgerException("amount must be positive, got " + amount);
        }
        BigDecimal rounded = amount.setScale(2, RoundingMode.HALF_EVEN);
        BigDecimal newSourceBalance = balances.get(from).subtract(rounded);
        if (newSourceBalance.signum() < 0 && !source.allowNegative()) {
            throw new LedgerException(String.format(
                    "insufficient funds in %s: balance %s, transfer %s", from, balances.get(from), rounded));
        }
        balances.put(from, newSourceBalance);
        balances.merge(to, rounded, BigDecimal::add);
        Entry entry = new Entry(nextSequence++, Instant.now(), from, to, rounded, memo);
        journal.add(entry);
        return entry;
    }

    public Optional<Account> find(String id) {
        return Optional.ofNullable(accounts.get(id));
    }

    public BigDecimal balance(String id) {
        BigDecimal balance = balances.get(id);
        if (balance == null) {
            throw new LedgerException("unknown account " + id);
        }
        return balance;
    }

    public List<Entry> history(String id) {
        List<Entry> result = new ArrayList<>();
        for (Entry entry : journal) {
            if (entry.from().equals(id) || entry.to().equals(id)) {
                result.add(entry);
            }
        }
        return Collections.unmodifiableList(result);
    }

    /** The invariant of double-entry bookkeeping; a non-zero total means a bug. */
    public BigDecimal trialBalance() {
        return balances.values().stream().reduce(BigDecimal.ZERO, BigDecimal::add);
    }

    public String statement(String id) {
        StringBuilder out = new StringBuilder();
        out.append(String.format("Statement for %s (%s)%n", id, find(id).map(Account::name).orElse("?")));
        BigDecimal running = BigDecimal.ZERO;
        for (Entry entry : history(id)) {
            BigDecimal signed = entry.to().equals(id) ? entry.amount() : entry.amount().negate();
            running = running.add(signed);
            out.append(String.format("%5d  %-24s %10s %10s%n", entry.sequence(), entry.memo(), signed, running));
        }
        return out.toString();
    }

    public static void main(String[] args) {
        Ledger ledger = new Ledger();
        ledger.open("equity", "Owner equity", AccountType.LIABILITY, true);
        ledger.open("cash", "Cash", AccountType.ASSET, false);
        ledger.open("rent", "Rent", AccountType.EXPENSE, true);
        ledger.transfer("equity", "cash", new BigDecimal("5000"), "initial funding");
        ledger.transfer("cash", "rent", new BigDecimal("1250.505"), "March rent");
        try {
            ledger.transfer("cash", "rent", new BigDecimal("10000"), "too much");
        } catch (LedgerException e) {
            System.err.println("rejected: " + e.getMessage());
        }
        System.out.print(ledger.statement("cash"));
        System.out.println("trial balance: " + ledger.trialBalance());
    }
}
